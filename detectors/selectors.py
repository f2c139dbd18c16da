"""Reads of the model-output side: which image files are left to predict, runs, predictions and their
export."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Mod

from detectors.kinds import KIND_GENDER
from detectors.models import DetectorRun, JudgeResponse, Prediction, PredictionStatus
from studies.batching import in_chunks
from studies.csvio import safe_dict_writer
from studies.models import Image, ItemImage, Study

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from detectors.judges import JudgeResponseData


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` (1-based) of ``count``: it owns the files with ``id % count == index - 1``."""

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


def _item_images(*, study: Study | None = None, t2i_model: str = "") -> QuerySet[ItemImage]:
    """The item images of a study's items (or every study's), of one T2I model (or all)."""
    links = ItemImage.objects.all()
    if study is not None:
        links = links.filter(item__study=study)
    if t2i_model:
        links = links.filter(item__t2i_model=t2i_model)
    return links


def images_in_scope(
    *, study: Study | None = None, t2i_model: str = "", shard: Shard | None = None
) -> QuerySet[Image]:
    """The image files a detector run covers: those of the items of a study (or of every study) and one T2I
    model (or all), in one shard, by id."""
    links = _item_images(study=study, t2i_model=t2i_model).filter(image=OuterRef("pk"))
    images = Image.objects.filter(Exists(links))
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
    """Files in scope with no prediction (ok or failed) for (detector, version), by id. A failed prediction
    counts as done: re-running does not retry it silently. Delete the failed rows (admin) to retry them."""
    predicted = Prediction.objects.filter(image=OuterRef("pk"), detector=detector, version=version)
    return images_in_scope(study=study, t2i_model=t2i_model, shard=shard).filter(~Exists(predicted))


def t2i_models(*, study: Study | None = None) -> list[str]:
    """The T2I model names of a study's items (or every study's), sorted."""
    links = _item_images(study=study).exclude(item__t2i_model="")
    return sorted(set(links.values_list("item__t2i_model", flat=True).distinct()))


def runs_recent(*, limit: int = 200) -> QuerySet[DetectorRun]:
    return DetectorRun.objects.select_related("study").order_by("-started_at", "-id")[:limit]


class PredictionUse(TypedDict):
    """The annotations ``predictions_list`` adds: where the prediction's file is used."""

    source_path: str
    item_key: str
    study_slug: str
    item_t2i_model: str


# A prediction as ``predictions_list`` returns it (for type checkers: the annotations are attributes).
PredictionWithUse: TypeAlias = "WithAnnotations[Prediction, PredictionUse]"


def predictions_list(
    *,
    detector: str = "",
    t2i_model: str = "",
    study: Study | None = None,
    version: str = "",
) -> QuerySet[PredictionWithUse]:
    """Predictions on the files of the items in scope, by id, each once."""
    links = _item_images(study=study, t2i_model=t2i_model).filter(image=OuterRef("image_id")).order_by("id")
    predictions = (
        Prediction.objects.filter(Exists(links))
        .annotate(
            source_path=Subquery(links.values("source_path")[:1]),
            item_key=Subquery(links.values("item__key")[:1]),
            study_slug=Subquery(links.values("item__study__slug")[:1]),
            item_t2i_model=Subquery(links.values("item__t2i_model")[:1]),
        )
        .order_by("id")
    )
    if detector:
        predictions = predictions.filter(detector=detector)
    if version:
        predictions = predictions.filter(version=version)
    return predictions


def prediction_detail(prediction: Prediction) -> str:
    """The free text kept with a gender verdict (BLIP-2's raw answer), else ''."""
    return str(prediction.output.get("detail", "")) if prediction.kind == KIND_GENDER else ""


#: Export columns, described in docs/reference/contracts.md; ``import_predictions`` reads the file back.
EXPORT_COLUMNS = [
    "study",
    "image",
    "detector",
    "version",
    "kind",
    "prediction",
    "reason",
    "scores",
    "detail",
    "status",
    "error",
    "seconds",
    "output",
]


def prediction_rows(*, detector: str = "", study: Study | None = None) -> list[dict[str, Any]]:
    """One dict per prediction in the export column order (``scores`` and ``output`` as dicts;
    ``image`` is the source path of the file's first item image in the study, if given)."""
    return [
        {
            "study": p.study_slug,
            "image": p.source_path,
            "detector": p.detector,
            "version": p.version,
            "kind": p.kind,
            "prediction": p.verdict,
            "reason": p.filter_reason,
            "scores": p.scores,
            "detail": prediction_detail(p),
            "status": p.status,
            "error": p.error if p.status == PredictionStatus.FAILED else "",
            "seconds": p.seconds,
            "output": p.output if p.status == PredictionStatus.OK else {},
        }
        for p in predictions_list(detector=detector, study=study)
    ]


def predictions_export(*, fmt: str, detector: str = "", study: Study | None = None) -> str:
    """The predictions as CSV (scores and output as JSON strings; a failure's output empty) or
    as a JSON list of objects."""
    rows = prediction_rows(detector=detector, study=study)
    if fmt == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    if fmt != "csv":
        raise ValueError(f"unknown format {fmt!r}: csv or json")
    out = io.StringIO()
    writer = safe_dict_writer(out, EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                **row,
                "scores": json.dumps(row["scores"], sort_keys=True),
                "seconds": "" if row["seconds"] is None else row["seconds"],
                "output": json.dumps(row["output"], sort_keys=True) if row["output"] else "",
            }
        )
    return out.getvalue()


@dataclass(frozen=True)
class PredictionSummary:
    """Counts of one (detector, version) for the runs page; male/female/filtered are the gender
    verdicts (0 for other kinds), ``ok`` every stored output."""

    detector: str
    version: str
    kind: str
    male: int
    female: int
    filtered: int
    ok: int
    failed: int

    @property
    def is_gender(self) -> bool:
        return self.kind == KIND_GENDER

    @property
    def total(self) -> int:
        return self.ok + self.failed


def prediction_summaries() -> list[PredictionSummary]:
    """Per (detector, version, kind): how many files got male / female / filtered, how many an
    output at all, how many failed."""
    ok = Q(status=PredictionStatus.OK)
    gender = ok & Q(kind=KIND_GENDER)
    rows = (
        Prediction.objects.values("detector", "version", "kind")
        .annotate(
            male=Count("id", filter=gender & Q(output__label="male")),
            female=Count("id", filter=gender & Q(output__label="female")),
            filtered=Count("id", filter=gender & Q(output__label="filtered")),
            ok=Count("id", filter=ok),
            failed=Count("id", filter=Q(status=PredictionStatus.FAILED)),
        )
        .order_by("detector", "version", "kind")
    )
    return [PredictionSummary(**row) for row in rows]


def judge_responses_cached(keys: list[str]) -> dict[str, JudgeResponseData]:
    """The cached judge answers among ``keys`` (``JudgeResponse``), by key."""
    from detectors.judges import JudgeResponseData

    found: dict[str, JudgeResponseData] = {}
    for chunk in in_chunks(keys):
        for row in JudgeResponse.objects.filter(key__in=chunk):
            found[row.key] = JudgeResponseData(
                content=row.content,
                mode=row.mode,
                probabilities=row.probabilities,
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
            )
    return found
