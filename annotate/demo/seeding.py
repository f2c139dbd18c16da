"""What every protocol's demo shares (``seed_demo``): the demo users, the demo study, seeded
answers, and the ``ProtocolDemo`` contract a protocol's ``demo.py`` fulfils."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from annotate import services
from annotate.errors import AnnotateError
from annotate.models import Label
from studies.models import Item, Question, Study
from studies.services import study_define

#: The two demo annotators (``seed_demo`` makes them, with their demo passwords).
ANNOTATORS = ("demo-annotator-1", "demo-annotator-2")
#: Study settings of a demo labelled by the two demo annotators: two labels per item, both needed.
TWO_ANNOTATORS: Mapping[str, Any] = MappingProxyType({"labels_per_item": 2, "agreement": "unanimous"})

IMPORTED_NOTE = (
    "The {detector} outputs on this page are demo predictions, imported: a file shipped with "
    "BiasLab's demo ({file}), loaded by import_predictions — made for the demo, not computed here "
    "(the demo downloads no model weights). Run run_detectors --detector {detector} --study {slug} "
    "for real ones."
)


class Step(Protocol):
    """Run another command of the app, as a researcher would (``seed_demo``'s ``_step``): its
    output kept short; False, with a warning, when it fails (the demo goes on without it)."""

    def __call__(self, command: str, *args: str, **options: Any) -> bool: ...


class ProtocolDemo:
    """A protocol's demo: ``define`` the study (idempotent), ``folder_write`` its images and
    manifest, ``seed`` its answers and steps, ``detectors`` for ``--run-detectors``."""

    slug: ClassVar[str]
    protocol: ClassVar[str]
    name: ClassVar[str]
    guidelines: ClassVar[str]
    #: Study settings other than the preset's (two demo annotators: two labels per item).
    definition: ClassVar[Mapping[str, Any]] = {}

    def define(self) -> Study:
        return study_ensure(
            self.slug, self.protocol, self.name, self.guidelines, self.note(), **dict(self.definition)
        )

    def note(self) -> str:
        """What its report pages say about the detector outputs they show (``demo_note``)."""
        return ""

    def folder_write(self, folder: Path) -> Path:
        raise NotImplementedError

    def seed(self, step: Step) -> int:
        return 0

    def detectors(self, step: Step, *, face_method: str) -> int:
        return 0


class ImportedDemo(ProtocolDemo):
    """A demo whose detector outputs are a shipped file of demo predictions: ``predictions``,
    of ``detector`` at ``version``, loaded by ``import_predictions``."""

    detector: ClassVar[str]
    version: ClassVar[str]
    predictions: ClassVar[Path]

    def note(self) -> str:
        file = self.predictions
        shown = file.relative_to(settings.BASE_DIR) if file.is_relative_to(settings.BASE_DIR) else file
        return IMPORTED_NOTE.format(detector=self.detector, file=shown.as_posix(), slug=self.slug)

    def predictions_import(self, step: Step) -> None:
        """``import_predictions`` of the shipped file, unless the study's images hold them already."""
        # Through the core's reverse relation (Image.predictions): annotate does not import detectors.
        imported = Item.objects.filter(
            study__slug=self.slug,
            item_images__image__predictions__detector=self.detector,
            item_images__image__predictions__version=self.version,
        ).exists()
        if not imported:
            step("import_predictions", str(self.predictions), study=self.slug)

    def prediction_rows(self) -> list[dict[str, str]]:
        """The rows of ``predictions`` (``prediction_row``), computed from the demo's images."""
        raise NotImplementedError

    def predictions_write(self) -> None:
        """Regenerate the shipped predictions file (after a change of the demo's images)."""
        rows = self.prediction_rows()
        with open(self.predictions, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def prediction_row(image: str, *, detector: str, version: str, kind: str, output: Any) -> dict[str, str]:
    """One row of a shipped demo predictions file (the ``import_predictions`` columns)."""
    return {
        "image": image,
        "detector": detector,
        "version": version,
        "kind": kind,
        "output": json.dumps(output, separators=(",", ":")),
    }


def study_ensure(
    slug: str, protocol: str, name: str, guidelines: str, note: str = "", **definition: Any
) -> Study:
    """The demo study ``slug`` (defined when missing), with its guidelines, its note and the demo
    annotators."""
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


def label_seed(item: Item, question: Question, annotator: User, value: str, reason: str = "") -> bool:
    """Seed one label unless the annotator already labelled it (by hand, or an earlier run) or
    the answer is settled; True when written."""
    if Label.objects.filter(item=item, question=question, annotator=annotator).exists():
        return False
    try:
        services.label_import(item=item, question=question, annotator=annotator, value=value, reason=reason)
    except AnnotateError:
        return False  # a researcher settled it, or the seats went to others: leave it
    return True


def annotators() -> list[User]:
    """The demo annotators, in the order of ``ANNOTATORS``."""
    users = {u.get_username(): u for u in get_user_model().objects.filter(username__in=ANNOTATORS)}
    return [users[name] for name in ANNOTATORS]


def labelled(study: Study) -> set[tuple[int, int, int]]:
    """(item, question, annotator) of every label of the study: one query instead of one per
    seeded label."""
    return set(Label.objects.filter(item__study=study).values_list("item_id", "question_id", "annotator_id"))


def answers_seed(
    study: Study, wanted: Sequence[tuple[Item, Mapping[str, Sequence[str]]]], people: list[User]
) -> int:
    """Seed each item's answers ``{question key: (annotator 1's, annotator 2's)}`` where that
    annotator has none yet; returns how many labels were written."""
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    done = labelled(study)
    written = 0
    for item, by_key in wanted:
        for key, values in by_key.items():
            question = questions[key]
            for annotator, value in zip(people, values, strict=True):
                if (item.pk, question.pk, annotator.pk) in done:
                    continue
                written += label_seed(item, question, annotator, value)
    return written


def demo_of(dotted: str) -> ProtocolDemo:
    """The demo a spec names (``ProtocolSpec.demo``), imported now."""
    from importlib import import_module

    module_name, _, attribute = dotted.rpartition(".")
    demo = getattr(import_module(module_name), attribute)
    if not isinstance(demo, ProtocolDemo):
        raise TypeError(f"{dotted} is not a ProtocolDemo")
    return demo
