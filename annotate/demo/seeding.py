"""The one demo mechanism: a protocol describes its demo study as a ``ProtocolDemo`` in its
``demo.py`` (``ProtocolSpec.demo``); ``seed_demo`` builds every one of them with this service."""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from PIL import Image as PILImage

from annotate import services
from annotate.demo.photos import save
from annotate.errors import AnnotateError
from annotate.models import FinalLabel, Label
from studies.models import Item, Question, Study
from studies.services import annotators_add, study_define

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

#: A manifest row of the demo (its ``image`` a path under the demo's folder) and how to draw that image.
File = tuple[Mapping[str, Any], Callable[[], PILImage.Image]]
#: An item's seeded answers, ``{question key: (annotator 1's, annotator 2's)}``; an answer is a
#: value or (value, reason).
Answers = Iterable[tuple[Item, Mapping[str, Sequence[str | tuple[str, str]]]]]
#: Another command of the app and its options.
Command = tuple[str, Mapping[str, Any]]
#: Runs a command as a researcher would (``seed_demo``'s ``_step``); False when it failed.
Step = Callable[..., bool]


@dataclass(frozen=True)
class ProtocolDemo:
    """A protocol's demo study, described; the steps that build it, and what each field gives
    them, are in docs/how-to/add-protocol.md."""

    slug: str
    protocol: str
    name: str
    guidelines: str
    files: Callable[[], Iterable[File]]
    answers: Callable[[Mapping[str, Item]], Answers]
    #: Study settings other than the preset's (``study_define``'s arguments).
    definition: Mapping[str, Any] = field(default_factory=dict)
    resolved: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    detector: str = ""
    version: str = "imported"
    prediction_rows: Callable[[], list[dict[str, str]]] | None = None
    predictions: Path | None = None
    steps: tuple[Command, ...] = ()
    detectors: tuple[str, ...] = ()
    draws: tuple[Command, ...] = ()

    def note(self) -> str:
        """What its report pages say about the shipped detector outputs they show (``demo_note``)."""
        if self.predictions is None:
            return ""
        file = self.predictions
        shown = file.relative_to(settings.BASE_DIR) if file.is_relative_to(settings.BASE_DIR) else file
        return IMPORTED_NOTE.format(detector=self.detector, file=shown.as_posix(), slug=self.slug)

    def define(self) -> Study:
        """The demo study (defined when missing), with its guidelines, its note and the demo annotators."""
        study = study_define(slug=self.slug, protocol=self.protocol, name=self.name, **self.definition).study
        update = []
        if not study.description:
            study.description = self.guidelines
            update.append("description")
        parameters = dict(study.parameters or {})
        note = self.note()
        if note and parameters.get("demo_note") != note:
            # Read by the report pages (templates/reports/_nav.html); no service writes a study's
            # parameters, and this key means nothing to the analyses.
            study.parameters = {**parameters, "demo_note": note}
            update.append("parameters")
        if update:
            study.save(update_fields=update)
        annotators_add(study=study, usernames=ANNOTATORS)  # missing accounts: no password
        return study

    def folder_write(self, folder: Path) -> Path:
        """Draw the demo's images under ``folder`` and write their manifest; returns its path."""
        rows = []
        for row, draw in self.files():
            target = folder / row["image"]
            if not target.exists():  # an image several rows show (a pair's seed photo) is drawn once
                save(draw(), target)
            rows.append(row)
        return table_write(folder / "manifest.csv", rows)

    def predictions_write(self, path: Path | None = None) -> Path:
        """Write ``prediction_rows`` (by default over the shipped file, after a change of the images)."""
        assert self.prediction_rows is not None
        return table_write(path or self.predictions or Path("predictions.csv"), self.prediction_rows())

    def seed(self, step: Step, folder: Path) -> int:
        """After the images' import: the detector outputs, the ``steps``, the answers; returns how
        many labels were written now."""
        imported = Item.objects.filter(
            study__slug=self.slug,
            item_images__image__predictions__detector=self.detector,
            item_images__image__predictions__version=self.version,
        ).exists()
        if self.prediction_rows is not None and not imported:
            file = self.predictions or self.predictions_write(folder / "predictions.csv")
            step("import_predictions", str(file), study=self.slug)
        for command, options in self.steps:
            step(command, **options)
        return self.answers_seed()

    def detectors_run(self, step: Step, *, face_method: str) -> int:
        """The offline detectors; once they all ran, the ``draws`` and the answers on what they drew."""
        option = [f"face_method={face_method}"]
        ran = [
            step("run_detectors", detector=name, study=self.slug, option=option) for name in self.detectors
        ]
        if not ran or not all(ran):
            return 0
        for command, options in self.draws:
            step(command, **options)
        return self.answers_seed()

    @transaction.atomic
    def answers_seed(self) -> int:
        """Seed each answer an annotator has not given yet (a label changed by hand is kept) and
        settle the ``resolved`` disputes; returns how many labels were written."""
        study = Study.objects.get(slug=self.slug)
        items = {item.key: item for item in Item.objects.filter(study=study)}
        questions = {q.key: q for q in Question.objects.filter(study=study)}
        people = {u.get_username(): u for u in get_user_model().objects.filter(username__in=ANNOTATORS)}
        done = set(
            Label.objects.filter(item__study=study).values_list("item_id", "question_id", "annotator_id")
        )
        written = 0
        for item, by_key in self.answers(items):
            for key, answers in by_key.items():
                question = questions[key]
                for name, answer in zip(ANNOTATORS, answers, strict=True):
                    value, reason = (answer, "") if isinstance(answer, str) else answer
                    if (item.pk, question.pk, people[name].pk) in done:
                        continue
                    with contextlib.suppress(AnnotateError):  # settled, or the seats went to others
                        services.label_import(
                            item=item, question=question, annotator=people[name], value=value, reason=reason
                        )
                        written += 1
        for (key, question_key), (value, note) in self.resolved.items():
            question = questions[question_key]
            # Not disputed any more (labels changed by hand), or settled already: nothing to settle.
            if key in items and not FinalLabel.objects.filter(item=items[key], question=question).exists():
                researcher = get_user_model().objects.get(username="demo-researcher")
                with contextlib.suppress(AnnotateError):
                    services.dispute_resolve(
                        item=items[key], question=question, researcher=researcher, value=value, note=note
                    )
        return written


def table_write(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """A CSV of ``rows``, its columns those of every row in the order they first appear."""
    columns = list(dict.fromkeys(column for row in rows for column in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def prediction_row(image: str, detector: str, version: str, kind: str, output: Any) -> dict[str, str]:
    """One row of a demo predictions file (the ``import_predictions`` columns)."""
    return {
        "image": image,
        "detector": detector,
        "version": version,
        "kind": kind,
        "output": json.dumps(output, separators=(",", ":")),
    }


def demo_of(dotted: str) -> ProtocolDemo:
    """The demo a spec names (``ProtocolSpec.demo``), imported now."""
    module_name, _, attribute = dotted.rpartition(".")
    demo = getattr(import_module(module_name), attribute)
    if not isinstance(demo, ProtocolDemo):
        raise TypeError(f"{dotted} is not a ProtocolDemo")
    return demo
