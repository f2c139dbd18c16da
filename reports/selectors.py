"""Reads for the reports: counts aggregated in SQL, returned as plain rows.

Nothing here loops over prediction rows in Python: every count is an SQL aggregate — conditional
(``Count(..., filter=Q(...))``) per (T2I model, prompt) for the human labels, and one grouped
``COUNT`` per (detector, version, T2I model, prompt, final label, verdict) for the predictions —
so a report over a million predictions moves a few tens of thousands of grouped rows out of the
database. ``reports.report`` turns the rows into the paper's metrics with ``reports.metrics``.

Which detector version is reported: a detector may have predictions from several versions. The
report uses, per detector, the version of its most recently written prediction in scope (the
highest prediction id), i.e. the version that was run last — see ``latest_detector_versions``.
Failed predictions (status ``failed``) never count in the metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Q, QuerySet

from annotate.models import Image, Study
from detectors.models import Prediction

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


def _pick_latest(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """detector -> version with the highest ``last_id`` among (detector, version, last_id) rows."""
    chosen: dict[str, tuple[int, str]] = {}
    for row in rows:
        best = chosen.get(row["detector"])
        if best is None or row["last_id"] > best[0]:
            chosen[row["detector"]] = (row["last_id"], row["version"])
    return {key: chosen[key][1] for key in sorted(chosen)}


def latest_detector_versions(
    *, study: Study | None = None, t2i_model: str | None = None, detector: str | None = None
) -> dict[str, str]:
    """detector key -> the version reported for it: the version of its most recently written
    prediction in scope (highest prediction id; ids grow with every insert, whereas timestamps of
    a bulk import can tie). Failed predictions count here, so a newer version that failed
    everywhere is reported as such rather than silently replaced by an older one.

    Aggregates per (detector, version), so only a handful of rows leave the database.
    """
    predictions = _predictions_in_scope(study=study, t2i_model=t2i_model)
    if detector:
        predictions = predictions.filter(detector=detector)
    return _pick_latest(predictions.values("detector", "version").annotate(last_id=Max("pk")).order_by())


def detector_verdict_counts(
    *, study: Study | None = None, t2i_model: str | None = None, detector: str | None = None
) -> list[dict[str, Any]]:
    """Predictions counted per (detector, version, T2I model, prompt, final label, verdict), with
    the highest prediction id of each group (``last_id``). Failed predictions have verdict "",
    images without a final label final label None. One scan of the prediction table."""
    predictions = _predictions_in_scope(study=study, t2i_model=t2i_model)
    if detector:
        predictions = predictions.filter(detector=detector)
    return list(
        predictions.values(
            "detector",
            "version",
            "image__t2i_model",
            "image__prompt_id",
            "image__final_label__value",
            "verdict",
        )
        .annotate(n=Count("pk"), last_id=Max("pk"))
        .order_by()
    )


def _human_class(value: str) -> str:
    return value if value in CLEAR else "rest"


def detector_joint_counts(
    *, study: Study | None = None, t2i_model: str | None = None, detector: str | None = None
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The reported version of each detector (the rule of ``latest_detector_versions``), and per
    (detector, T2I model, prompt) the 3 x 3 table of human final label x detector verdict.

    Only images with both a final label and an ``ok`` prediction of the reported version count.
    Row keys: detector, t2i_model, prompt_id and ``JOINT_KEYS`` (``h_male__d_female`` = human
    male, detector female; ``rest`` = not clear / filtered). Both come from one aggregate query
    (``detector_verdict_counts``); the Python below folds its few thousand grouped rows.
    """
    grouped = detector_verdict_counts(study=study, t2i_model=t2i_model, detector=detector)
    latest: dict[tuple[str, str], int] = {}
    for row in grouped:
        key = (row["detector"], row["version"])
        latest[key] = max(latest.get(key, 0), row["last_id"])
    versions = _pick_latest({"detector": d, "version": v, "last_id": i} for (d, v), i in latest.items())
    tables: dict[tuple[str, str, int], dict[str, int]] = {}
    for row in grouped:
        final, verdict = row["image__final_label__value"], row["verdict"]
        if versions[row["detector"]] != row["version"] or final is None or not verdict:
            continue
        key = (row["detector"], row["image__t2i_model"], row["image__prompt_id"])
        table = tables.setdefault(key, dict.fromkeys(JOINT_KEYS, 0))
        verdict_class = verdict if verdict in CLEAR else "rest"
        table[f"h_{_human_class(final)}__d_{verdict_class}"] += row["n"]
    rows = [
        {"detector": d, "t2i_model": m, "prompt_id": p, **tables[(d, m, p)]} for d, m, p in sorted(tables)
    ]
    return versions, rows


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


def check_filters(
    *,
    study: Study | None,
    t2i_model: str | None = None,
    detector: str | None = None,
    category: str | None = None,
) -> None:
    """Raise UnknownFilter when a T2I model, prompt category or detector name matches nothing in
    the study, so a typo gets an answer instead of an empty report."""
    images = images_in_scope(study=study)
    if t2i_model and not images.filter(t2i_model=t2i_model).exists():
        known = (
            ", ".join(sorted(set(images.order_by().values_list("t2i_model", flat=True).distinct()))) or "none"
        )
        raise UnknownFilter(f"No images of T2I model '{t2i_model}' (T2I models: {known}).")
    if category and not images.filter(prompt__category=category).exists():
        known = (
            ", ".join(sorted(set(images.order_by().values_list("prompt__category", flat=True).distinct())))
            or "none"
        )
        raise UnknownFilter(f"No images of prompt category '{category}' (categories: {known}).")
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


def data_fingerprint() -> tuple[Any, ...]:
    """A cheap summary of every row a report reads, which any write through the services changes.

    Per table: row count and highest id (an insert raises the id, a delete lowers the count), plus
    the last change time of the rows that are updated in place: labels (``updated_at``, agreement)
    and final labels (``decided_at``; every final-label change also appends a
    FinalLabelRevision). Predictions are insert-only (a re-run inserts; conflicts are ignored).
    One query of scalar sub-selects: counts and maxima, each a single index or table scan.
    """
    from annotate.models import FinalLabel, FinalLabelRevision, Label, Prompt

    parts = []
    for model, extra in (
        (Study, None),
        (Prompt, None),
        (Image, None),
        (FinalLabel, "decided_at"),
        (FinalLabelRevision, None),
        (Label, "updated_at"),
        (Prediction, None),
    ):
        table = connection.ops.quote_name(model._meta.db_table)
        parts += [f"(SELECT COUNT(*) FROM {table})", f"(SELECT MAX(id) FROM {table})"]
        if extra:
            parts.append(f"(SELECT MAX({connection.ops.quote_name(extra)}) FROM {table})")
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts))
        row = cursor.fetchone()
    return tuple(str(v) if v is not None and not isinstance(v, int) else v for v in row)
