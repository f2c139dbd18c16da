"""Writes of the objects protocol: a detector's boxes copied onto the items for people to
check (``prepare_box_check``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q

from detectors.kinds import KIND_OBJECTS
from detectors.models import Prediction, PredictionStatus
from protocols.objects.kinds import BOXES, BOXES_KEY
from studies.models import ImageRole, Item, ItemImage, Study

#: Item metadata keys the box check writes (``BOXES_KEY``: the boxes kind draws them), ``reports`` counts them.
BOXES_SOURCE_KEY = "boxes_source"


class BoxCheckRefused(ValueError):
    """The study cannot be prepared for a box check as asked; the message says why."""


@dataclass(frozen=True)
class BoxCheckSummary:
    """What ``box_check_prepare`` did: items given new boxes per ``detector@version``, items
    unchanged or without a prediction, keys of labelled items whose boxes it kept, boxes written."""

    prepared: dict[str, int]
    unchanged: int
    no_prediction: int
    refused: tuple[str, ...]
    n_boxes: int

    @property
    def n_prepared(self) -> int:
        return sum(self.prepared.values())


def _boxes_of(
    output: dict[str, Any], *, min_confidence: float, max_boxes: int | None
) -> list[dict[str, Any]]:
    """The boxes to check: confidence ≥ ``min_confidence``, highest confidence first (ties keep
    the detector's order), at most ``max_boxes``."""
    kept = [o for o in output.get("objects", []) if o["confidence"] >= min_confidence]
    kept.sort(key=lambda o: -o["confidence"])
    return [
        {"class": o["class"], "confidence": o["confidence"], "box": list(o["box"])} for o in kept[:max_boxes]
    ]


def box_check_prepare(
    *, study: Study, detector: str, min_confidence: float = 0.0, max_boxes: int | None = None
) -> BoxCheckSummary:
    """Copy each item's latest ok ``objects`` prediction of ``detector`` into its metadata
    (idempotent; an item with labels keeps its boxes); BoxCheckRefused when it cannot be done."""
    if not study.questions.filter(kind=BOXES.name).exists():
        raise BoxCheckRefused(
            f"Study '{study.slug}' asks no box question (kind boxes): the box check is for object "
            "co-occurrence studies (create_study --protocol objects)."
        )
    if not (isinstance(min_confidence, int | float) and 0.0 <= min_confidence <= 1.0):
        raise BoxCheckRefused(f"The minimum confidence must be in [0, 1], not {min_confidence!r}.")
    if max_boxes is not None and max_boxes < 1:
        raise BoxCheckRefused(f"The maximum number of boxes must be at least 1, not {max_boxes}.")
    with transaction.atomic():
        items = list(Item.objects.select_for_update().filter(study=study).order_by("id"))
        shown = ItemImage.objects.filter(item__study=study, role=ImageRole.IMAGE)
        images = dict(shown.values_list("item_id", "image_id"))
        latest: dict[int, Prediction] = {}
        predictions = Prediction.objects.filter(
            # A subquery: a list of the study's images would be a value per image.
            image_id__in=shown.values("image_id"),
            detector=detector,
            kind=KIND_OBJECTS,
            status=PredictionStatus.OK,
        ).order_by("image_id", "-id")
        for prediction in predictions:
            latest.setdefault(prediction.image_id, prediction)
        if not latest:
            raise BoxCheckRefused(
                f"No image of study '{study.slug}' has an objects prediction of detector '{detector}': "
                f"run run_detectors --detector {detector} --study {study.slug} first."
            )
        labelled = set(
            Item.objects.filter(study=study)
            .filter(Q(labels__isnull=False) | Q(final_labels__isnull=False))
            .values_list("pk", flat=True)
        )
        prepared: dict[str, int] = {}
        changed: list[Any] = []
        refused: list[str] = []
        unchanged = no_prediction = n_boxes = 0
        for item in items:
            chosen = latest.get(images.get(item.pk, -1))
            if chosen is None:
                no_prediction += 1
                continue
            boxes = _boxes_of(chosen.output, min_confidence=min_confidence, max_boxes=max_boxes)
            source = f"{chosen.detector}@{chosen.version}"
            metadata = dict(item.metadata or {})
            if metadata.get(BOXES_KEY) == boxes and metadata.get(BOXES_SOURCE_KEY) == source:
                unchanged += 1
                continue
            if item.pk in labelled:
                refused.append(item.key)
                continue
            item.metadata = {**metadata, BOXES_KEY: boxes, BOXES_SOURCE_KEY: source}
            changed.append(item)
            prepared[source] = prepared.get(source, 0) + 1
            n_boxes += len(boxes)
        Item.objects.bulk_update(changed, ["metadata"], batch_size=500)
    return BoxCheckSummary(
        prepared=dict(sorted(prepared.items())),
        unchanged=unchanged,
        no_prediction=no_prediction,
        refused=tuple(refused),
        n_boxes=n_boxes,
    )
