"""Reads of the human side: image states, dispute queue, progress, details, annotator stats.

Image states are computed in SQL (annotations, ``Case``, ``Exists``) so lists of thousands of
images never load labels into Python. Writes live in ``annotate.services``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    IntegerField,
    Max,
    Min,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    Image,
    ImageState,
    Label,
    LabelRevision,
    Study,
)

# Final labels set by a person (researcher or imported ground truth): they freeze the labels.
DECIDED_SOURCES = (FinalLabelSource.RESOLVED, FinalLabelSource.IMPORTED)


@dataclass(frozen=True)
class Progress:
    """Labels an annotator has given in a study, and images they could still label."""

    done: int
    remaining: int

    @property
    def total(self) -> int:
        return self.done + self.remaining


@dataclass(frozen=True)
class AnnotatorStats:
    """One annotator's work in a study, for researchers.

    ``median_seconds`` is None when no label has a stored duration; ``agreement_with_final``
    (fraction 0..1) is None when none of the annotator's images has a final label yet.
    """

    username: str
    labels_done: int
    median_seconds: float | None
    agreement_with_final: float | None


def _count_subquery(queryset: QuerySet, field: str = "pk", distinct: bool = False) -> Coalesce:
    """COUNT over rows correlated with the outer image, as a scalar subquery (0 when none).

    A subquery rather than ``Count("labels")`` keeps several counts from multiplying each
    other's joins.
    """
    counted = queryset.order_by().values("image_id").annotate(n=Count(field, distinct=distinct)).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def images_with_state(*, study: Study) -> QuerySet[Image]:
    """The study's images annotated with ``state`` (an ``ImageState`` value), ``n_labels``,
    ``final_value`` and ``final_source`` ('' when there is no final label); filter on
    ``state`` freely, it is SQL.

    State rules: a final label set by a researcher or an import → resolved; N labels that
    are all equal → agreed; N labels that differ → disputed; some labels → in progress;
    none → unlabelled.

    One LEFT JOIN to the labels grouped by image (5 to 8 times faster than per-image subqueries on
    6,000 images); "all equal" is MIN(value) = MAX(value). Because of that join, further
    per-image counts added by callers must be subqueries, not ``Count()`` over another join.
    """
    n = study.labels_per_image
    return (
        Image.objects.filter(study=study)
        .annotate(
            n_labels=Count("labels"),
            lowest_value=Min("labels__value"),
            highest_value=Max("labels__value"),
            final_value=Coalesce(F("final_label__value"), Value(""), output_field=CharField()),
            final_source=Coalesce(F("final_label__source"), Value(""), output_field=CharField()),
        )
        .annotate(
            state=Case(
                When(final_source__in=DECIDED_SOURCES, then=Value(ImageState.RESOLVED.value)),
                When(n_labels__gte=n, lowest_value=F("highest_value"), then=Value(ImageState.AGREED.value)),
                When(n_labels__gte=n, then=Value(ImageState.DISPUTED.value)),
                When(n_labels__gt=0, then=Value(ImageState.IN_PROGRESS.value)),
                default=Value(ImageState.UNLABELLED.value),
                output_field=CharField(),
            )
        )
        .order_by("id")
    )


def image_state(image: Image) -> str:
    """The ``ImageState`` value of one image, by the same rules as ``images_with_state``."""
    return images_with_state(study=image.study).values_list("state", flat=True).get(pk=image.pk)


def dispute_queue(*, study: Study) -> QuerySet[Image]:
    """Disputed images (N labels that differ, no researcher decision yet), oldest first."""
    return (
        images_with_state(study=study)
        .filter(state=ImageState.DISPUTED)
        .select_related("prompt")
        .order_by("id")
    )


# The counts of annotator_progress in one fixed statement. Raw SQL because it runs on every key
# press: building and compiling the same nested counts through the ORM took ~5 ms of CPU per
# call, executing them about 1 ms. Same claim rules as _CANDIDATES_SQL in annotate.services (kept in step by
# tests/annotate/test_selectors.py, which runs on SQLite and PostgreSQL). Shaped so that no
# count probes another table once per image of the study:
#   done          the annotator's labels in the study;
#   open          their open seats, less images a person already decided;
#   unfinished    images with fewer than N completed seats and no decision (an index range) …
#   mine          … less those the annotator holds or held a seat on (their seats, a few);
#   held          … less those others hold every remaining seat of right now — driven from
#                 the open seats (a partial index, a handful of rows), never from the images.
_PROGRESS_SQL = """
SELECT
  (SELECT COUNT(*) FROM {label} l JOIN {image} i ON i.id = l.image_id
    WHERE l.annotator_id = %(user)s AND i.study_id = %(study)s),
  (SELECT COUNT(*) FROM {assignment} a JOIN {image} i ON i.id = a.image_id
    WHERE a.annotator_id = %(user)s AND i.study_id = %(study)s AND a.completed_at IS NULL
      AND NOT EXISTS ({decided})),
  (SELECT COUNT(*) FROM {image} i
    WHERE i.study_id = %(study)s AND i.completed_seats < %(n)s AND NOT EXISTS ({decided})),
  (SELECT COUNT(*) FROM {assignment} a JOIN {image} i ON i.id = a.image_id
    WHERE a.annotator_id = %(user)s AND i.study_id = %(study)s AND i.completed_seats < %(n)s
      AND NOT EXISTS ({decided})),
  (SELECT COUNT(*) FROM {image} i
    WHERE i.id IN (SELECT o.image_id FROM {assignment} o
                    WHERE o.completed_at IS NULL AND o.expires_at > %(now)s)
      AND i.study_id = %(study)s AND i.completed_seats < %(n)s AND NOT EXISTS ({decided})
      AND NOT EXISTS (SELECT 1 FROM {assignment} a WHERE a.image_id = i.id AND a.annotator_id = %(user)s)
      AND (SELECT COUNT(*) FROM {assignment} a
            WHERE a.image_id = i.id AND (a.completed_at IS NOT NULL OR a.expires_at > %(now)s)) >= %(n)s)
"""
_DECIDED_SQL = "SELECT 1 FROM {final} f WHERE f.image_id = i.id AND f.source IN (%(resolved)s, %(imported)s)"


def annotator_progress(*, study: Study, annotator: AbstractBaseUser, now: datetime | None = None) -> Progress:
    """done: labels this annotator gave in the study. remaining: images still needing labels
    that this annotator could still take — the seats they hold open plus the images they could
    claim now (an upper bound: other annotators may take some of them first).

    One query, cheap enough for every key press: the claimable images are counted through the
    completed_seats index, and the live-seat count runs only on the few images that have an
    open seat (others may hold all their remaining seats right now: those are not takeable).
    """
    tables = {
        "label": Label._meta.db_table,
        "image": Image._meta.db_table,
        "assignment": Assignment._meta.db_table,
        "final": FinalLabel._meta.db_table,
    }
    sql = _PROGRESS_SQL.format(decided=_DECIDED_SQL.format(**tables), **tables)
    params = {
        "user": annotator.pk,
        "study": study.pk,
        "n": study.labels_per_image,
        "now": connection.ops.adapt_datetimefield_value(now or timezone.now()),
        "resolved": str(FinalLabelSource.RESOLVED),
        "imported": str(FinalLabelSource.IMPORTED),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        done, open_seats, unfinished, mine, held_by_others = cursor.fetchone()
    return Progress(done=done, remaining=open_seats + unfinished - mine - held_by_others)


def _final_label_dict(final: FinalLabel | FinalLabelRevision) -> dict[str, Any]:
    return {
        "value": final.value,
        "source": final.source,
        "decided_by": final.decided_by.username if final.decided_by else None,
        "note": final.note,
        "decided_at": final.decided_at,
    }


def image_detail(*, image: Image) -> dict[str, Any]:
    """Everything a researcher sees about one image: its state, the labels with their
    annotators' names, the final label, and the history of both (oldest first).

    Only for researchers: annotators must never see each other's labels.
    """
    labels = Label.objects.filter(image=image).select_related("annotator").order_by("id")
    final = FinalLabel.objects.filter(image=image).select_related("decided_by").first()
    label_history = (
        LabelRevision.objects.filter(label__image=image)
        .select_related("label__annotator", "changed_by")
        .order_by("changed_at", "id")
    )
    final_history = (
        FinalLabelRevision.objects.filter(image=image)
        .select_related("decided_by")
        .order_by("decided_at", "id")
    )
    return {
        "image": image,
        "state": image_state(image),
        "labels": [
            {
                "annotator": label.annotator.username,
                "annotator_id": label.annotator_id,
                "value": label.value,
                "reason": label.reason,
                "duration_ms": label.duration_ms,
                "created_at": label.created_at,
                "updated_at": label.updated_at,
            }
            for label in labels
        ],
        "final_label": _final_label_dict(final) if final else None,
        "label_history": [
            {
                "annotator": rev.label.annotator.username,
                "value": rev.value,
                "reason": rev.reason,
                "changed_by": rev.changed_by.username,
                "changed_at": rev.changed_at,
            }
            for rev in label_history
        ],
        "final_label_history": [_final_label_dict(rev) for rev in final_history],
    }


def annotator_stats(*, study: Study) -> list[AnnotatorStats]:
    """Per annotator of the study (members and anyone with labels in it), by username:
    labels done, median seconds per label (from stored durations) and the fraction of their
    labels that equal the image's final label, over images that have one."""
    rows = Label.objects.filter(image__study=study).values_list(
        "annotator__username", "duration_ms", "value", "image__final_label__value"
    )
    per_user: dict[str, dict[str, list]] = {
        username: {"durations": [], "matches": [], "n": []}
        for username in study.annotators.values_list("username", flat=True)
    }
    for username, duration_ms, value, final_value in rows:
        bucket = per_user.setdefault(username, {"durations": [], "matches": [], "n": []})
        bucket["n"].append(1)
        if duration_ms is not None:
            bucket["durations"].append(duration_ms / 1000)
        if final_value:
            bucket["matches"].append(value == final_value)
    return [
        AnnotatorStats(
            username=username,
            labels_done=len(bucket["n"]),
            median_seconds=statistics.median(bucket["durations"]) if bucket["durations"] else None,
            agreement_with_final=(
                sum(bucket["matches"]) / len(bucket["matches"]) if bucket["matches"] else None
            ),
        )
        for username, bucket in sorted(per_user.items())
    ]


def studies_for_annotator(*, user: AbstractBaseUser) -> QuerySet[Study]:
    """Studies the user may label, by name."""
    return Study.objects.filter(annotators=user).order_by("name")


def label_rows_for_agreement(
    *, study: Study, t2i_model: str | None = None, category: str | None = None
) -> list[tuple[int, str, str, str, str]]:
    """(image_id, t2i_model, category, annotator_username, value) for every label of the
    study, optionally of one T2I model / prompt category, ordered by image then annotator id —
    the plain rows agreement metrics are computed from."""
    labels = Label.objects.filter(image__study=study)
    if t2i_model:
        labels = labels.filter(image__t2i_model=t2i_model)
    if category:
        labels = labels.filter(image__prompt__category=category)
    return list(
        labels.order_by("image_id", "annotator_id").values_list(
            "image_id", "image__t2i_model", "image__prompt__category", "annotator__username", "value"
        )
    )
