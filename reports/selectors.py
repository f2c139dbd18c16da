"""Reads for the reports: counts aggregated in SQL, returned as plain rows.

Nothing here loops over label or prediction rows in Python: every count is a conditional
aggregate (``Count(..., filter=Q(...))``) grouped by (T2I model, prompt) or (detector, T2I
model, prompt), so a report over a million predictions moves a few thousand rows out of the
database. ``reports.report`` turns the rows into the paper's metrics with ``reports.metrics``.

Which detector version is reported: a detector may have predictions from several versions. The
report uses, per detector, the version whose most recent prediction is newest (ties broken by
the highest prediction id), i.e. the version that was run last — see
``latest_detector_versions``. Failed predictions (status ``failed``) never count.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from annotate.models import Image, Study
from detectors.models import Prediction, PredictionStatus

MALE = "male"
FEMALE = "female"
LOW_QUALITY = "low_quality"
CLEAR = (MALE, FEMALE)

# Keys of a joint-count row: human class x detector verdict, both in (male, female, rest) order,
# where human "rest" = any final label that is not clear and detector "rest" = filtered.
CLASSES = ("male", "female", "rest")
JOINT_KEYS = tuple(f"h_{h}__d_{d}" for h in CLASSES for d in CLASSES)


def images_in_scope(*, study: Study | None = None, t2i_model: str | None = None) -> QuerySet[Image]:
    """Images of one study (or all), optionally of one T2I model."""
    images = Image.objects.all()
    if study is not None:
        images = images.filter(study=study)
    if t2i_model:
        images = images.filter(t2i_model=t2i_model)
    return images


def coverage(*, study: Study | None = None, t2i_model: str | None = None) -> dict[str, int]:
    """How many images are in scope and how many of them have a final label."""
    return images_in_scope(study=study, t2i_model=t2i_model).aggregate(
        images=Count("pk"), final_labels=Count("final_label")
    )


def human_prompt_counts(*, study: Study | None = None, t2i_model: str | None = None) -> list[dict[str, Any]]:
    """Final-label counts per (T2I model, prompt), for prompts with at least one final label.

    Row keys: t2i_model, prompt_id, category, word, prompt, n_male, n_female, n_low_quality,
    n_other (every final label that is not male, female or low_quality). Ordered by model,
    category, word.
    """
    value = "final_label__value"
    return list(
        images_in_scope(study=study, t2i_model=t2i_model)
        .filter(final_label__isnull=False)
        .values("t2i_model", "prompt_id")
        .annotate(
            n_male=Count("pk", filter=Q(**{value: MALE})),
            n_female=Count("pk", filter=Q(**{value: FEMALE})),
            n_low_quality=Count("pk", filter=Q(**{value: LOW_QUALITY})),
            n_other=Count("pk", filter=~Q(**{f"{value}__in": (MALE, FEMALE, LOW_QUALITY)})),
            category=Max("prompt__category"),
            word=Max("prompt__word"),
            prompt=Max("prompt__text"),
        )
        .order_by("t2i_model", "category", "word", "prompt_id")
    )


def _predictions_in_scope(*, study: Study | None, t2i_model: str | None) -> QuerySet[Prediction]:
    predictions = Prediction.objects.all()
    if study is not None:
        predictions = predictions.filter(image__study=study)
    if t2i_model:
        predictions = predictions.filter(image__t2i_model=t2i_model)
    return predictions


def latest_detector_versions(
    *, study: Study | None = None, t2i_model: str | None = None, detector: str | None = None
) -> dict[str, str]:
    """detector key -> the version reported for it (the one whose newest prediction is latest).

    Aggregates per (detector, version), so only a handful of rows leave the database.
    """
    predictions = _predictions_in_scope(study=study, t2i_model=t2i_model)
    if detector:
        predictions = predictions.filter(detector=detector)
    rows = (
        predictions.values("detector", "version")
        .annotate(last_at=Max("created_at"), last_id=Max("pk"))
        .order_by()
    )
    chosen: dict[str, tuple[Any, int, str]] = {}
    for row in rows:
        rank = (row["last_at"], row["last_id"], row["version"])
        if row["detector"] not in chosen or rank[:2] > chosen[row["detector"]][:2]:
            chosen[row["detector"]] = rank
    return {key: chosen[key][2] for key in sorted(chosen)}


def _joint_filters() -> dict[str, Count]:
    """Conditional counts of the 3 x 3 table (human class x detector verdict) of one group."""
    human = {
        "male": Q(image__final_label__value=MALE),
        "female": Q(image__final_label__value=FEMALE),
        "rest": ~Q(image__final_label__value__in=CLEAR),
    }
    verdict = {"male": Q(verdict=MALE), "female": Q(verdict=FEMALE), "rest": ~Q(verdict__in=CLEAR)}
    return {f"h_{h}__d_{d}": Count("pk", filter=human[h] & verdict[d]) for h in CLASSES for d in CLASSES}


def detector_joint_counts(
    *, versions: dict[str, str], study: Study | None = None, t2i_model: str | None = None
) -> list[dict[str, Any]]:
    """Per (detector, T2I model, prompt): the 3 x 3 table of human final label x detector verdict.

    Only images with both a final label and an ``ok`` prediction of the detector's reported
    version count. Row keys: detector, t2i_model, prompt_id and ``JOINT_KEYS``
    (``h_male__d_female`` = human male, detector female; ``rest`` = not clear / filtered).
    """
    if not versions:
        return []
    which = Q()
    for key, version in versions.items():
        which |= Q(detector=key, version=version)
    predictions = _predictions_in_scope(study=study, t2i_model=t2i_model).filter(
        which, status=PredictionStatus.OK, image__final_label__isnull=False
    )
    return list(
        predictions.values("detector", "image__t2i_model", "image__prompt_id")
        .annotate(**_joint_filters())
        .order_by("detector", "image__t2i_model", "image__prompt_id")
    )


class UnknownFilter(ValueError):
    """A report was asked for a study, T2I model or detector that has no data."""


def study_for_slug(slug: str | None) -> Study | None:
    """The study with this slug (None for no slug = all studies); UnknownFilter naming the
    studies that exist otherwise."""
    if not slug:
        return None
    study = Study.objects.filter(slug=slug).first()
    if study is None:
        known = ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise UnknownFilter(f"No study with slug '{slug}' (existing studies: {known}).")
    return study


def check_filters(*, study: Study | None, t2i_model: str | None = None, detector: str | None = None) -> None:
    """Raise UnknownFilter when a T2I model or detector name matches nothing in the study, so a
    typo gets an answer instead of an empty report."""
    images = images_in_scope(study=study)
    if t2i_model and not images.filter(t2i_model=t2i_model).exists():
        known = ", ".join(images.order_by().values_list("t2i_model", flat=True).distinct()) or "none"
        raise UnknownFilter(f"No images of T2I model '{t2i_model}' (T2I models: {known}).")
    if detector and not _predictions_in_scope(study=study, t2i_model=None).filter(detector=detector).exists():
        known = (
            ", ".join(
                _predictions_in_scope(study=study, t2i_model=None)
                .order_by()
                .values_list("detector", flat=True)
                .distinct()
            )
            or "none"
        )
        raise UnknownFilter(f"No predictions of detector '{detector}' (detectors: {known}).")
