"""Reads of the model-output side: what is left to predict, runs, predictions and their export."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import Mod

from annotate.models import Image, Study
from detectors.models import DetectorRun, Prediction, PredictionStatus


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` (1-based) of ``count``: it owns the images with ``id % count == index - 1``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/4"`` → Shard(2, 4). 1-based so ``1/1`` is the whole set; raises ValueError."""
        try:
            index_text, count_text = text.split("/")
            index, count = int(index_text), int(count_text)
        except ValueError:
            raise ValueError(f"shard must look like i/n (e.g. 1/4), got {text!r}") from None
        if count < 1 or not 1 <= index <= count:
            raise ValueError(f"shard {text!r}: need 1 <= i <= n")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def images_in_scope(
    *, study: Study | None = None, t2i_model: str = "", shard: Shard | None = None
) -> QuerySet[Image]:
    """The images a detector run covers: a study (or all), one T2I model (or all), one shard."""
    images = Image.objects.all()
    if study is not None:
        images = images.filter(study=study)
    if t2i_model:
        images = images.filter(t2i_model=t2i_model)
    if shard is not None and shard.count > 1:
        images = images.annotate(_shard=Mod("id", shard.count)).filter(_shard=shard.index - 1)
    return images.order_by("id")


def images_pending(
    *,
    detector: str,
    version: str,
    study: Study | None = None,
    t2i_model: str = "",
    shard: Shard | None = None,
) -> QuerySet[Image]:
    """Images in scope with no prediction (ok or failed) for (detector, version), by id.

    A failed prediction counts as done: re-running does not retry it silently. Delete the failed
    rows (admin) to retry them.
    """
    predicted = Prediction.objects.filter(image=OuterRef("pk"), detector=detector, version=version)
    return images_in_scope(study=study, t2i_model=t2i_model, shard=shard).filter(~Exists(predicted))


def runs_recent(*, limit: int = 200) -> QuerySet[DetectorRun]:
    return DetectorRun.objects.select_related("study").order_by("-started_at", "-id")[:limit]


def predictions_list(
    *,
    detector: str = "",
    t2i_model: str = "",
    study: Study | None = None,
    version: str = "",
) -> QuerySet[Prediction]:
    predictions = Prediction.objects.select_related("image", "image__study").order_by("id")
    if detector:
        predictions = predictions.filter(detector=detector)
    if version:
        predictions = predictions.filter(version=version)
    if t2i_model:
        predictions = predictions.filter(image__t2i_model=t2i_model)
    if study is not None:
        predictions = predictions.filter(image__study=study)
    return predictions


#: Export columns. ``prediction`` is empty and ``error`` set when ``status`` is failed;
#: ``detail`` keeps free text (BLIP-2's raw answer, an unknown imported reason). The file can be
#: read back by ``import_predictions`` unchanged.
EXPORT_COLUMNS = [
    "study",
    "image",
    "detector",
    "version",
    "prediction",
    "reason",
    "scores",
    "detail",
    "status",
    "error",
    "seconds",
]


def prediction_rows(*, detector: str = "", study: Study | None = None) -> list[dict[str, Any]]:
    """One dict per prediction in the export column order (``scores`` as a dict)."""
    return [
        {
            "study": p.image.study.slug,
            "image": p.image.source_path,
            "detector": p.detector,
            "version": p.version,
            "prediction": p.verdict,
            "reason": p.filter_reason,
            "scores": p.scores,
            "detail": p.detail,
            "status": p.status,
            "error": p.error if p.status == PredictionStatus.FAILED else "",
            "seconds": p.seconds,
        }
        for p in predictions_list(detector=detector, study=study)
    ]


def predictions_export(*, fmt: str, detector: str = "", study: Study | None = None) -> str:
    """The predictions as CSV (scores as a JSON string) or as a JSON list of objects."""
    rows = prediction_rows(detector=detector, study=study)
    if fmt == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    if fmt != "csv":
        raise ValueError(f"unknown format {fmt!r}: csv or json")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                **row,
                "scores": json.dumps(row["scores"], sort_keys=True),
                "seconds": "" if row["seconds"] is None else row["seconds"],
            }
        )
    return out.getvalue()


@dataclass(frozen=True)
class PredictionSummary:
    """Counts of one (detector, version) for the runs page."""

    detector: str
    version: str
    male: int
    female: int
    filtered: int
    failed: int

    @property
    def total(self) -> int:
        return self.male + self.female + self.filtered + self.failed


def prediction_summaries() -> list[PredictionSummary]:
    """Per (detector, version): how many images got male / female / filtered / failed."""
    from django.db.models import Count, Q

    rows = (
        Prediction.objects.values("detector", "version")
        .annotate(
            male=Count("id", filter=Q(verdict="male")),
            female=Count("id", filter=Q(verdict="female")),
            filtered=Count("id", filter=Q(verdict="filtered")),
            failed=Count("id", filter=Q(status=PredictionStatus.FAILED)),
        )
        .order_by("detector", "version")
    )
    return [PredictionSummary(**row) for row in rows]
