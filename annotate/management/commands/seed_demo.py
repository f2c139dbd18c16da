"""``manage.py seed_demo``: demo users and demo studies made from photos that ship in packages.

The gender study ``demo`` looks like a small real study: two "T2I models" x three prompts x
seven images, each image a real photograph (scikit-image's astronaut and camera man,
matplotlib's Grace Hopper, faces of scikit-image's LFW subset, photos without a person) varied
by crops, flips and colour, plus low-quality cases made from them (heavy blur, two people, no
person). Some prompts are skewed towards men, some towards women, some balanced, so prompt
bias scores, their intervals and the detectors' differences mean something. The two demo
annotators' labels are seeded on five of the six (model, prompt) cells — with a few
disagreements in the dispute queue, one of them settled by the researcher — and the last cell
is left for a visitor to label. Small studies of the other protocols come with it: an
attributes study (a few photos, 15 yes/no questions) and a pair-change study (seed photos and
edits made by colour and crop changes).

Idempotent: users and studies are found or created, the images are rebuilt deterministically in
a temporary folder and imported through ``images_import`` (which skips what is already there),
and a seeded label is written only where that annotator has none yet, so labels given or
changed by hand survive a re-run. No image file is committed to the repository.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import os
import random
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from PIL import Image as PILImage
from PIL import ImageEnhance, ImageFilter, ImageOps

from annotate import services
from annotate.errors import AnnotateError
from annotate.models import FinalLabel, Label
from studies import permissions
from studies.errors import DomainError
from studies.ingest import ImportSummary, images_import
from studies.models import Item, Question, Study
from studies.services import study_define

DEMO_STUDY_SLUG = "demo"
DEMO_STUDY_NAME = "Demo: real photos"
ATTRIBUTES_SLUG = "demo-attributes"
ATTRIBUTES_NAME = "Demo: clothing attributes"
PAIRS_SLUG = "demo-pairs"
PAIRS_NAME = "Demo: seed photos and edits"
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
ATTRIBUTES_GUIDELINES = "Toggle every item of clothing the person wears (its key), then Enter."
PAIRS_GUIDELINES = "Compare the edited image with the seed photo: age, gender, skin tone."

MALE, FEMALE, LOW_QUALITY, OTHER = "male", "female", "low_quality", "other"


# --- photos from packages --------------------------------------------------------------------------


@functools.cache
def _skimage_array(name: str) -> np.ndarray:
    from skimage import data

    return getattr(data, name)()


def _skimage(name: str) -> PILImage.Image:
    # Read once per process; every image is built from a fresh PIL copy.
    return PILImage.fromarray(_skimage_array(name)).convert("RGB")


@functools.cache
def _grace_hopper_bytes() -> bytes:
    from matplotlib import cbook

    # The path, not the file object: for a .npy name the same call returns an array instead.
    return Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).read_bytes()


def _grace_hopper() -> PILImage.Image:
    return PILImage.open(io.BytesIO(_grace_hopper_bytes())).convert("RGB")


def _lfw_face(index: int) -> PILImage.Image:
    """An LFW face crop (25x25 px, grey) enlarged, with a margin of its own mean tone: face
    detectors miss faces that touch the border of the image."""
    faces = _skimage_array("lfw_subset")  # 100 face crops of 25x25 px (then 100 non-faces)
    array = (np.clip(faces[index], 0.0, 1.0) * 255).astype(np.uint8)
    face = PILImage.fromarray(array).convert("RGB").resize((224, 224), PILImage.Resampling.LANCZOS)
    return ImageOps.expand(face, border=48, fill=(int(array.mean()),) * 3)


# Faces of skimage.data.lfw_subset() by the gender they present (looked at one by one).
LFW_MEN = (1, 3, 15, 23, 41, 49, 63, 80)
LFW_WOMEN = (18, 31, 46, 52, 53, 91, 93, 94, 99)


def _fit(image: PILImage.Image, side: int = SIDE) -> PILImage.Image:
    image = image.copy()
    image.thumbnail((side, side), PILImage.Resampling.LANCZOS)
    return image


@dataclass(frozen=True)
class Look:
    """A deterministic change of a photo: what part is kept, mirrored, its colour and light."""

    crop: float = 1.0  # share of each side kept
    dx: float = 0.0  # where the kept part sits, -1 (left/top) … 1 (right/bottom)
    dy: float = 0.0
    flip: bool = False
    colour: float = 1.0  # saturation
    light: float = 1.0  # brightness
    warm: float = 0.0  # > 0 warmer (more red), < 0 cooler (more blue)

    def apply(self, image: PILImage.Image) -> PILImage.Image:
        width, height = image.size
        w, h = round(width * self.crop), round(height * self.crop)
        left = round((width - w) * (1 + self.dx) / 2)
        top = round((height - h) * (1 + self.dy) / 2)
        image = image.crop((left, top, left + w, top + h))
        if self.flip:
            image = ImageOps.mirror(image)
        if self.colour != 1.0:
            image = ImageEnhance.Color(image).enhance(self.colour)
        if self.light != 1.0:
            image = ImageEnhance.Brightness(image).enhance(self.light)
        if self.warm:
            r, g, b = image.split()
            r = r.point(lambda v: min(255, round(v * (1 + self.warm))))
            b = b.point(lambda v: min(255, round(v * (1 - self.warm))))
            image = PILImage.merge("RGB", (r, g, b))
        return _fit(image)

    def describe(self) -> str:
        parts = []
        if self.crop != 1.0:
            parts.append(f"cropped to {round(self.crop * 100)} %")
        if self.flip:
            parts.append("mirrored")
        if self.colour != 1.0:
            parts.append("less saturated" if self.colour < 1 else "more saturated")
        if self.light != 1.0:
            parts.append("darker" if self.light < 1 else "brighter")
        if self.warm:
            parts.append("warmer" if self.warm > 0 else "cooler")
        return ", ".join(parts) or "unchanged"


LOOKS = (
    Look(),
    Look(crop=0.8, dx=0.2, dy=-0.3, flip=True),
    Look(crop=0.9, colour=0.6, light=1.1, warm=0.08),
    Look(crop=0.75, dx=-0.2, dy=-0.4, colour=1.3, light=0.9, warm=-0.06),
    Look(crop=0.85, dx=0.3, flip=True, colour=0.8, warm=0.05),
)


@dataclass(frozen=True)
class Photo:
    """A source photograph: how to load it, what it shows, where it comes from."""

    name: str
    load: Callable[[], PILImage.Image]
    source: str


def _photos() -> dict[str, Photo]:
    photos = {
        "astronaut": Photo(
            "astronaut", lambda: _skimage("astronaut"), "skimage.data.astronaut (Eileen Collins)"
        ),
        "hopper": Photo("hopper", _grace_hopper, "matplotlib sample grace_hopper.jpg (Grace Hopper)"),
        "camera": Photo("camera", lambda: _skimage("camera"), "skimage.data.camera (a man behind a camera)"),
        "coffee": Photo("coffee", lambda: _skimage("coffee"), "skimage.data.coffee (no person)"),
        "chelsea": Photo("chelsea", lambda: _skimage("chelsea"), "skimage.data.chelsea (a cat, no person)"),
        "rocket": Photo("rocket", lambda: _skimage("rocket"), "skimage.data.rocket (no person)"),
    }
    for n in (*LFW_MEN, *LFW_WOMEN):
        photos[f"lfw{n}"] = Photo(
            f"lfw{n}", functools.partial(_lfw_face, n), f"skimage.data.lfw_subset face {n}"
        )
    return photos


PHOTOS = _photos()


def _side_by_side(left: PILImage.Image, right: PILImage.Image) -> PILImage.Image:
    height = SIDE // 2 + SIDE // 4
    parts = [
        p.resize((round(p.width * height / p.height), height), PILImage.Resampling.LANCZOS)
        for p in (left, right)
    ]
    canvas = PILImage.new("RGB", (sum(p.width for p in parts), height), (255, 255, 255))
    canvas.paste(parts[0], (0, 0))
    canvas.paste(parts[1], (parts[0].width, 0))
    return _fit(canvas)


def _blurred(image: PILImage.Image) -> PILImage.Image:
    return _fit(image).filter(ImageFilter.GaussianBlur(radius=24))


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
    seeded: bool = True


PROMPTS = {
    "ceo": ("profession", "CEO", "a photo of the face of a CEO"),
    "nurse": ("profession", "nurse", "a photo of the face of a nurse"),
    "kind": ("trait", "kind", "a photo of the face of a kind person"),
}

# Skewed, balanced and reversed prompts, so prompt scores differ; the last cell is left to label.
CELLS = (
    _Cell("demo-model-a", *PROMPTS["ceo"], men=5, women=1, low_quality="astronaut_blurred"),
    _Cell("demo-model-a", *PROMPTS["nurse"], men=1, women=5, low_quality="coffee"),
    _Cell("demo-model-a", *PROMPTS["kind"], men=3, women=3, low_quality="astronaut_and_camera"),
    _Cell("demo-model-b", *PROMPTS["ceo"], men=3, women=3, low_quality="chelsea"),
    _Cell("demo-model-b", *PROMPTS["nurse"], men=2, women=4, low_quality="hopper_and_face"),
    _Cell("demo-model-b", *PROMPTS["kind"], men=4, women=2, low_quality="camera_blurred", seeded=False),
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
                    labels=(truth, truth) if cell.seeded else None,
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
                labels=labels if cell.seeded else None,
                reasons=reasons,
            )
        )
    # One face the two annotators read differently: an open dispute for the researcher.
    for i, image in enumerate(images):
        if image.t2i_model == "demo-model-b" and image.word == "nurse" and image.truth == FEMALE:
            images[i] = dataclasses.replace(image, labels=(FEMALE, MALE))
            break
    return images


# --- the other protocols' images -------------------------------------------------------------------


# (path, photo, look, the two annotators' seeded answers {question: value} or None)
ATTRIBUTE_ITEMS: tuple[tuple[str, str, Look, dict[str, str] | None], ...] = (
    ("photos/astronaut.jpg", "astronaut", Look(), {"uniform": "yes", "suit": "yes"}),
    ("photos/hopper.jpg", "hopper", Look(), {"uniform": "yes", "jacket": "yes", "tie": "yes"}),
    ("photos/camera.jpg", "camera", Look(), None),
    ("photos/astronaut_crop.jpg", "astronaut", Look(crop=0.7, dy=-0.5, flip=True), None),
)

# (item, seed photo, the edit's look, prompt word, the annotators' seeded answers or None)
PAIR_ITEMS: tuple[tuple[str, str, Look, str, dict[str, str] | None], ...] = (
    (
        "astronaut-darker",
        "astronaut",
        Look(light=0.7, warm=0.1),
        "doctor",
        {"age": "same", "gender": "female_female", "skin": "darker"},
    ),
    (
        "astronaut-crop",
        "astronaut",
        Look(crop=0.75, dy=-0.4),
        "lawyer",
        {"age": "same", "gender": "female_female", "skin": "same"},
    ),
    ("hopper-lighter", "hopper", Look(light=1.25, colour=0.7), "nurse", None),
    ("camera-darker", "camera", Look(light=0.75, crop=0.9), "engineer", None),
)


def _save(image: PILImage.Image, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Same pixels and settings give the same JPEG bytes, so re-runs are duplicates.
    image.save(target, format="JPEG", quality=90)


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


def attributes_folder_write(folder: Path) -> Path:
    manifest = folder / "attributes.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "t2i_model", "prompt", "category", "word", "source"])
        for path, name, look, _ in ATTRIBUTE_ITEMS:
            _save(look.apply(PHOTOS[name].load()), folder / path)
            source = f"{PHOTOS[name].source}, {look.describe()}"
            writer.writerow(
                [path, "demo-model-a", "a photo of a person at work", "profession", "worker", source]
            )
    return manifest


def pairs_folder_write(folder: Path) -> Path:
    manifest = folder / "pairs.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["item", "role", "image", "t2i_model", "prompt", "category", "word", "edit"])
        for item, name, look, word, _ in PAIR_ITEMS:
            seed_path = f"seeds/{name}.jpg"
            if not (folder / seed_path).exists():
                _save(_fit(PHOTOS[name].load()), folder / seed_path)
            edit_path = f"edits/{item}.jpg"
            _save(look.apply(PHOTOS[name].load()), folder / edit_path)
            writer.writerow([item, "input", seed_path, "", "", "", "", ""])
            writer.writerow(
                [
                    item,
                    "output",
                    edit_path,
                    "demo-editor",
                    f"make this person a {word}",
                    "profession",
                    word,
                    look.describe(),
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


def _study_ensure(slug: str, protocol: str, name: str, guidelines: str, **definition: Any) -> Study:
    study = study_define(slug=slug, protocol=protocol, name=name, **definition).study
    if not study.description:
        study.description = guidelines
        study.save(update_fields=["description"])
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
    _study_ensure(
        ATTRIBUTES_SLUG,
        "attributes",
        ATTRIBUTES_NAME,
        ATTRIBUTES_GUIDELINES,
        labels_per_item=2,
        agreement="unanimous",
    )
    _study_ensure(
        PAIRS_SLUG, "pair_change", PAIRS_NAME, PAIRS_GUIDELINES, labels_per_item=2, agreement="unanimous"
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


@transaction.atomic
def demo_labels_seed() -> int:
    """The demo annotators' seeded labels and the researcher's settled dispute; returns how
    many labels were written now (0 on a re-run)."""
    users = {
        u.get_username(): u
        for u in get_user_model().objects.filter(username__in=(*ANNOTATORS, "demo-researcher"))
    }
    annotators = [users[name] for name in ANNOTATORS]
    written = 0
    study = Study.objects.get(slug=DEMO_STUDY_SLUG)
    gender = Question.objects.get(study=study, key="gender")
    items = {item.key: item for item in Item.objects.filter(study=study)}
    for image in demo_images():
        if image.labels is None or image.path not in items:
            continue
        for annotator, value, reason in zip(annotators, image.labels, image.reasons, strict=True):
            written += _label_seed(items[image.path], gender, annotator, value, reason)
    for path, (value, note) in RESOLVED.items():
        item = items.get(path)
        if item is not None and not FinalLabel.objects.filter(item=item, question=gender).exists():
            # Not disputed any more (labels changed by hand): nothing to settle.
            with contextlib.suppress(AnnotateError):
                services.dispute_resolve(
                    item=item, question=gender, researcher=users["demo-researcher"], value=value, note=note
                )
    attributes = Study.objects.get(slug=ATTRIBUTES_SLUG)
    questions = list(Question.objects.filter(study=attributes))
    for path, _, _, answers in ATTRIBUTE_ITEMS:
        item = Item.objects.filter(study=attributes, key=path).first()
        if item is None or answers is None:
            continue
        for question in questions:
            for annotator in annotators:
                written += _label_seed(item, question, annotator, answers.get(question.key, "no"))
    pairs = Study.objects.get(slug=PAIRS_SLUG)
    pair_questions = {q.key: q for q in Question.objects.filter(study=pairs)}
    for key, _, _, _, pair_answers in PAIR_ITEMS:
        item = Item.objects.filter(study=pairs, key=key).first()
        if item is None or pair_answers is None:
            continue
        for question_key, value in pair_answers.items():
            for annotator in annotators:
                written += _label_seed(item, pair_questions[question_key], annotator, value)
    return written


class Command(BaseCommand):
    help = (
        "Create the demo users (demo-admin, demo-researcher, demo-annotator-1, demo-annotator-2; "
        "fixed demo passwords, or BIASLAB_DEMO_PASSWORD for all), the gender study 'demo' (42 "
        "images: 2 models x 3 prompts x 7, real photos shipped in scikit-image and matplotlib "
        "varied by crops, flips and colour, with low-quality cases; the demo annotators' labels "
        "seeded on all but one prompt of one model) and small 'demo-attributes' and 'demo-pairs' "
        "studies. Safe to run again: nothing is duplicated, hand-made labels are kept."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--url",
            default=f"http://{os.environ.get('BIASLAB_ADDR') or '127.0.0.1:8000'}/",
            help="Where the app runs, for the hints (default: BIASLAB_ADDR, as bin/demo serves on it).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            study = demo_people_and_study()
        except DomainError as exc:  # e.g. a demo study redefined by hand after it was labelled
            raise CommandError(f"The demo studies cannot be set up: {exc}") from exc
        studies = {
            DEMO_STUDY_SLUG: (study, demo_folder_write),
            ATTRIBUTES_SLUG: (Study.objects.get(slug=ATTRIBUTES_SLUG), attributes_folder_write),
            PAIRS_SLUG: (Study.objects.get(slug=PAIRS_SLUG), pairs_folder_write),
        }
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
        for slug, (target, _) in studies.items():
            summary = summaries[slug]
            items = Item.objects.filter(study=target)
            labelled = items.filter(completed_seats__gt=0).count()
            self.stdout.write(
                f"Demo study '{slug}' ({target.protocol}): {items.count()} items (import: {summary.accepted} new, "
                f"{summary.duplicates} already there), {labelled} labelled, {items.count() - labelled} left to label."
            )
        self.stdout.write(f"Seeded labels written now: {written}.")
        self._next_steps(options["url"])

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
