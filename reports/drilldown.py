"""Reads behind the dashboard's filters and drill-downs.

Counts are aggregated in SQL (``values().annotate(Count(..., filter=Q(...)))``); only the rows a
page shows (one prompt's images, one page of a gallery) are loaded as objects, with their
labels and predictions prefetched so a page costs a fixed number of queries.

Which detector version: the one ``reports.selectors.latest_detector_versions`` reports (the
version run last), so a drill-down always shows the predictions the report's numbers came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Prefetch, Q, QuerySet

from annotate.models import FinalLabel, Image, Label, Prompt, Study
from detectors.models import Prediction, PredictionStatus, Verdict
from reports.selectors import latest_detector_versions

CLEAR = (Verdict.MALE.value, Verdict.FEMALE.value)
VERDICTS = (Verdict.MALE.value, Verdict.FEMALE.value, Verdict.FILTERED.value)

# Gallery kinds of a detector's disagreements with the human final label.
DISAGREEMENTS = {
    "all": "All disagreements",
    "false_keep": "False keeps (low quality to humans, gendered by the detector)",
    "false_filter": "False filters (clear to humans, filtered by the detector)",
    "wrong_gender": "Wrong gender (kept, but the other gender)",
}


class UnknownDisagreement(ValueError):
    """A gallery kind that is not one of ``DISAGREEMENTS``."""


@dataclass(frozen=True)
class FilterOptions:
    """What the dashboard's filter form offers, read from the data."""

    studies: list[Study]
    t2i_models: list[str]
    categories: list[str]
    detectors: list[str]


def filter_options(*, study: Study | None = None) -> FilterOptions:
    """Studies, T2I models, categories and detectors present (within ``study`` when given)."""
    images = Image.objects.all() if study is None else Image.objects.filter(study=study)
    prompts = Prompt.objects.all() if study is None else Prompt.objects.filter(study=study)
    predictions = Prediction.objects.all() if study is None else Prediction.objects.filter(image__study=study)
    return FilterOptions(
        studies=list(Study.objects.order_by("name")),
        t2i_models=list(images.order_by("t2i_model").values_list("t2i_model", flat=True).distinct()),
        categories=list(prompts.order_by("category").values_list("category", flat=True).distinct()),
        detectors=list(predictions.order_by("detector").values_list("detector", flat=True).distinct()),
    )


def prompt_ids(*, study: Study | None = None) -> dict[tuple[str, str, str], int]:
    """(category, word, prompt text) -> prompt id, so report rows can link to their drill-down.

    Across studies the same prompt text may exist twice; the lowest id wins (the drill-down then
    shows that study's images, and says which study it is).
    """
    prompts = Prompt.objects.all() if study is None else Prompt.objects.filter(study=study)
    out: dict[tuple[str, str, str], int] = {}
    for pid, category, word, text in prompts.order_by("-id").values_list("id", "category", "word", "text"):
        out[(category, word, text)] = pid
    return out


def detector_prompt_counts(
    *,
    study: Study | None = None,
    t2i_model: str | None = None,
    category: str | None = None,
    detectors: Sequence[str] | None = None,
) -> dict[tuple[str, str, str, str, str], tuple[int, int, int]]:
    """(category, word, prompt, t2i_model, detector) -> (n_male, n_female, n_predicted).

    Per prompt and T2I model, the detector's male and female verdicts on images that have a
    final human label (the images the report compares on), reported version only.
    """
    versions = latest_detector_versions(study=study, t2i_model=t2i_model)
    if detectors is not None:
        versions = {k: v for k, v in versions.items() if k in detectors}
    if not versions:
        return {}
    which = Q()
    for key, version in versions.items():
        which |= Q(detector=key, version=version)
    predictions = Prediction.objects.filter(
        which, status=PredictionStatus.OK, image__final_label__isnull=False
    )
    if study is not None:
        predictions = predictions.filter(image__study=study)
    if t2i_model:
        predictions = predictions.filter(image__t2i_model=t2i_model)
    if category:
        predictions = predictions.filter(image__prompt__category=category)
    rows = (
        predictions.values(
            "detector",
            "image__t2i_model",
            "image__prompt__category",
            "image__prompt__word",
            "image__prompt__text",
        )
        .annotate(
            n_male=Count("pk", filter=Q(verdict=Verdict.MALE)),
            n_female=Count("pk", filter=Q(verdict=Verdict.FEMALE)),
            n=Count("pk"),
        )
        .order_by()
    )
    return {
        (
            r["image__prompt__category"],
            r["image__prompt__word"],
            r["image__prompt__text"],
            r["image__t2i_model"],
            r["detector"],
        ): (r["n_male"], r["n_female"], r["n"])
        for r in rows
    }


# --- prompt drill-down ---------------------------------------------------------------------------


@dataclass
class ImageRow:
    """One image of a prompt with everything said about it, for side-by-side display."""

    image: Image
    labels: list[Label]
    final: FinalLabel | None
    verdicts: dict[str, Prediction | None] = field(default_factory=dict)

    @property
    def verdict_cells(self) -> list[tuple[str, Prediction | None, bool]]:
        """(detector, prediction, disagrees with the final label) in detector order."""
        human = self.final.value if self.final else None
        return [(key, p, disagrees(human, p)) for key, p in self.verdicts.items()]


def disagrees(human: str | None, prediction: Prediction | None) -> bool:
    """A kept image of the wrong gender, a filtered clear image, or a kept unclear image."""
    if human is None or prediction is None or prediction.status != PredictionStatus.OK:
        return False
    if human in CLEAR:
        return prediction.verdict != human
    return prediction.verdict in CLEAR


def prompt_images(
    *, prompt: Prompt, t2i_model: str | None = None, detectors: Sequence[str] | None = None
) -> tuple[list[ImageRow], list[str]]:
    """The prompt's images (by T2I model, then index) with both annotators' labels, the final
    label and each detector's prediction (reported version; None when it has none).

    Returns (rows, detector keys shown). Four queries whatever the number of images.
    """
    versions = latest_detector_versions(study=prompt.study)
    if detectors is not None:
        versions = {k: v for k, v in versions.items() if k in detectors}
    which = Q(pk__in=[])
    for key, version in versions.items():
        which |= Q(detector=key, version=version)
    images = (
        Image.objects.filter(prompt=prompt)
        .select_related("final_label")
        .prefetch_related(
            Prefetch(
                "labels", queryset=Label.objects.select_related("annotator").order_by("created_at", "id")
            ),
            Prefetch(
                "predictions", queryset=Prediction.objects.filter(which), to_attr="reported_predictions"
            ),
        )
        .order_by("t2i_model", "index", "id")
    )
    if t2i_model:
        images = images.filter(t2i_model=t2i_model)
    rows = []
    for image in images:
        by_detector = {p.detector: p for p in image.reported_predictions}
        rows.append(
            ImageRow(
                image=image,
                labels=list(image.labels.all()),
                final=getattr(image, "final_label", None),
                verdicts={key: by_detector.get(key) for key in versions},
            )
        )
    return rows, list(versions)


# --- detector drill-down -------------------------------------------------------------------------


def _reported_predictions(
    *, detector: str, study: Study | None, t2i_model: str | None, category: str | None
) -> QuerySet[Prediction]:
    """The detector's ok predictions (reported version) on images with a final label, in scope."""
    version = latest_detector_versions(study=study, detector=detector).get(detector)
    if version is None:
        return Prediction.objects.none()
    predictions = Prediction.objects.filter(
        detector=detector, version=version, status=PredictionStatus.OK, image__final_label__isnull=False
    )
    if study is not None:
        predictions = predictions.filter(image__study=study)
    if t2i_model:
        predictions = predictions.filter(image__t2i_model=t2i_model)
    if category:
        predictions = predictions.filter(image__prompt__category=category)
    return predictions


@dataclass(frozen=True)
class DetectorConfusion:
    """Human final label x detector verdict, and the filtering / gender tables derived from it."""

    detector: str
    version: str | None
    counts: dict[tuple[str, str], int]  # (human final label, verdict) -> images
    human_labels: list[str]
    n_failed: int

    def _sum(self, humans: Sequence[str] | None, verdicts: Sequence[str]) -> int:
        return sum(
            n
            for (h, v), n in self.counts.items()
            if v in verdicts and (h in humans if humans is not None else h not in CLEAR)
        )

    @property
    def filtering(self) -> dict[str, int]:
        """Clear = positive; kept = male or female verdict: tp, fn, fp, tn."""
        return {
            "tp": self._sum(CLEAR, CLEAR),
            "fn": self._sum(CLEAR, (Verdict.FILTERED,)),
            "fp": self._sum(None, CLEAR),
            "tn": self._sum(None, (Verdict.FILTERED,)),
        }

    @property
    def gender(self) -> dict[str, int]:
        """On images clear to humans and kept: human male/female x detector male/female."""
        return {f"{h}_{v}": self.counts.get((h, v), 0) for h in CLEAR for v in CLEAR}

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def detector_confusion(
    *, detector: str, study: Study | None = None, t2i_model: str | None = None, category: str | None = None
) -> DetectorConfusion:
    """Counts of (final label, verdict) for one detector, aggregated in SQL."""
    version = latest_detector_versions(study=study, detector=detector).get(detector)
    predictions = _reported_predictions(
        detector=detector, study=study, t2i_model=t2i_model, category=category
    )
    rows = predictions.values("image__final_label__value", "verdict").annotate(n=Count("pk")).order_by()
    counts = {(r["image__final_label__value"], r["verdict"]): r["n"] for r in rows}
    failed = Prediction.objects.filter(detector=detector, version=version, status=PredictionStatus.FAILED)
    if study is not None:
        failed = failed.filter(image__study=study)
    if t2i_model:
        failed = failed.filter(image__t2i_model=t2i_model)
    if category:
        failed = failed.filter(image__prompt__category=category)
    labels = list(study.label_values) if study is not None else ["male", "female", "low_quality", "other"]
    labels += sorted({h for h, _ in counts} - set(labels))
    return DetectorConfusion(
        detector=detector, version=version, counts=counts, human_labels=labels, n_failed=failed.count()
    )


def _disagreement_filter(kind: str) -> Q:
    human = "image__final_label__value"
    false_keep = ~Q(**{f"{human}__in": CLEAR}) & Q(verdict__in=CLEAR)
    false_filter = Q(**{f"{human}__in": CLEAR}) & Q(verdict=Verdict.FILTERED)
    wrong_gender = Q(**{human: Verdict.MALE}, verdict=Verdict.FEMALE) | Q(
        **{human: Verdict.FEMALE}, verdict=Verdict.MALE
    )
    kinds = {
        "false_keep": false_keep,
        "false_filter": false_filter,
        "wrong_gender": wrong_gender,
        "all": false_keep | false_filter | wrong_gender,
    }
    if kind not in kinds:
        raise UnknownDisagreement(f"Unknown kind {kind!r}: use one of {', '.join(DISAGREEMENTS)}.")
    return kinds[kind]


def detector_disagreements(
    *,
    detector: str,
    kind: str = "all",
    study: Study | None = None,
    t2i_model: str | None = None,
    category: str | None = None,
) -> QuerySet[Prediction]:
    """The detector's predictions that disagree with the final label, as a queryset to paginate,
    ordered by image; each row carries its image, prompt and final label."""
    predictions = _reported_predictions(
        detector=detector, study=study, t2i_model=t2i_model, category=category
    )
    return (
        predictions.filter(_disagreement_filter(kind))
        .select_related("image", "image__prompt", "image__final_label")
        .order_by("image_id")
    )


def disagreement_counts(
    *, detector: str, study: Study | None = None, t2i_model: str | None = None, category: str | None = None
) -> dict[str, int]:
    """How many images each gallery kind holds (one aggregate query)."""
    predictions = _reported_predictions(
        detector=detector, study=study, t2i_model=t2i_model, category=category
    )
    return predictions.aggregate(
        **{kind: Count("pk", filter=_disagreement_filter(kind)) for kind in DISAGREEMENTS}
    )
