"""Reads of the human side: item states (in SQL), disputes, progress, item details, annotator stats."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotate import sql as rows
from annotate.models import (
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    ItemState,
    Label,
    LabelRevision,
)
from studies.batching import IsIn, in_chunks
from studies.models import Item, Question, Study
from studies.selectors import images_load, item_questions, study_questions

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

# Final labels set by a person (researcher or imported ground truth): they freeze the labels.
DECIDED_SOURCES = (FinalLabelSource.RESOLVED, FinalLabelSource.IMPORTED)


@dataclass(frozen=True)
class Progress:
    """Items an annotator labelled in a study and could still label (``more``: ``remaining`` capped)."""

    done: int
    remaining: int
    more: bool = False


@dataclass(frozen=True)
class AnnotatorStats:
    """One annotator's work in a study; None where there is no duration or no final label yet."""

    username: str
    labels_done: int
    median_seconds: float | None
    agreement_with_final: float | None
    answers_with_final: int = 0  # how many of the annotator's answers the agreement is over


def _count_subquery(queryset: QuerySet, field: str = "pk") -> Coalesce:
    """COUNT(DISTINCT field) of the rows correlated with the outer item, as a scalar subquery (0 if none)."""
    counted = queryset.order_by().values("item_id").annotate(n=Count(field, distinct=True)).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


class ItemStateFields(TypedDict):
    """The annotations ``items_with_state`` adds to each item."""

    n_labels: int
    n_unsettled: int
    has_decided: bool
    state: str


# An item as ``items_with_state`` returns it (for type checkers: the annotations are attributes).
ItemWithState: TypeAlias = "WithAnnotations[Item, ItemStateFields]"


def items_with_state(*, study: Study | None) -> QuerySet[ItemWithState]:
    """The study's items (None: every study's) annotated with ``state``, ``n_labels`` and
    ``n_unsettled``, all in SQL."""
    n = F("study__labels_per_item") if study is None else study.labels_per_item
    labels = Label.objects.filter(item=OuterRef("pk"))
    unsettled = Label.objects.filter(item=OuterRef("pk")).exclude(
        Exists(FinalLabel.objects.filter(item=OuterRef("item"), question=OuterRef("question")))
    )
    decided = FinalLabel.objects.filter(item=OuterRef("pk"), source__in=DECIDED_SOURCES)
    return (
        (Item.objects.all() if study is None else Item.objects.filter(study=study))
        .annotate(
            n_labels=_count_subquery(labels, "annotator_id"),
            n_unsettled=_count_subquery(unsettled, "question_id"),
            has_decided=Exists(decided),
        )
        .annotate(
            state=Case(
                When(n_labels__gte=n, n_unsettled__gt=0, then=Value(ItemState.DISPUTED.value)),
                When(has_decided=True, n_unsettled=0, then=Value(ItemState.RESOLVED.value)),
                When(n_labels__gte=n, then=Value(ItemState.AGREED.value)),
                When(n_labels__gt=0, then=Value(ItemState.IN_PROGRESS.value)),
                default=Value(ItemState.UNLABELLED.value),
                output_field=CharField(),
            )
        )
        .order_by("id")
    )


def items_filtered(*, study: Study, filters: Mapping[str, Any]) -> QuerySet[ItemWithState]:
    """``items_with_state`` with prompts, narrowed by ``filters``' state, t2i_model, category and q."""
    lookups = {"state": "state", "t2i_model": "t2i_model", "category": "prompt__category"}
    items = items_with_state(study=study).select_related("prompt")
    items = items.filter(**{lookup: filters[name] for name, lookup in lookups.items() if filters.get(name)})
    if q := filters.get("q"):
        items = items.filter(Q(key__icontains=q) | Q(prompt__text__icontains=q))
    return items


def item_state(item: Item) -> str:
    """The ``ItemState`` value of one item, by the same rules as ``items_with_state``."""
    return items_with_state(study=item.study).values_list("state", flat=True).get(pk=item.pk)


def item_question_states(item: Item) -> dict[str, str]:
    """The state of each question the item asks, by question key (``items_with_state``'s rules)."""
    n = item.study.labels_per_item
    annotators: dict[int, set[int]] = {}
    for question_id, annotator_id in Label.objects.filter(item=item).values_list(
        "question_id", "annotator_id"
    ):
        annotators.setdefault(question_id, set()).add(annotator_id)
    sources = dict(FinalLabel.objects.filter(item=item).values_list("question_id", "source"))
    states: dict[str, str] = {}
    for question in item_questions(item, study_questions(item.study)):
        labelled, source = len(annotators.get(question.pk, ())), sources.get(question.pk)
        if source in DECIDED_SOURCES:
            states[question.key] = ItemState.RESOLVED
        elif labelled >= n:
            states[question.key] = ItemState.DISPUTED if source is None else ItemState.AGREED
        else:
            states[question.key] = ItemState.IN_PROGRESS if labelled else ItemState.UNLABELLED
    return states


@dataclass(frozen=True)
class DisputeRow:
    """One disputed (item, question) with its labels (annotator, value, reason)."""

    item: Item
    question: Question
    labels: list[tuple[str, str, str]]
    n_needed: int

    @property
    def n_labels(self) -> int:
        return len(self.labels)


def _disputed_items(study: Study) -> QuerySet[ItemWithState]:
    # The state of the labelled items only (through the labels' item index), not of every item.
    labelled = Label.objects.filter(item__study=study).values("item_id")
    return items_with_state(study=study).filter(pk__in=labelled, state=ItemState.DISPUTED)


def _disputed_pairs(
    study: Study, items: list[tuple[int, list[str]]]
) -> tuple[dict[tuple[int, int], list[tuple[str, str, str]]], list[tuple[int, int]]]:
    """The items' labels by (item, question), and their disputed (item, question) pairs in order."""
    # A chunk of items at a time (SQLite's variable limit); an item's labels come in its chunk.
    settled: set[tuple[int, int]] = set()
    by_item: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
    for chunk in in_chunks(pk for pk, _ in items):
        settled.update(
            FinalLabel.objects.filter(IsIn(F("item_id"), chunk)).values_list("item_id", "question_id")
        )
        for item_id, question_id, username, value, reason in (
            Label.objects.filter(IsIn(F("item_id"), chunk))
            .order_by("item_id", "question_id", "annotator__username")
            .values_list("item_id", "question_id", "annotator__username", "value", "reason")
        ):
            by_item.setdefault((item_id, question_id), []).append((username, value, reason))
    questions = study_questions(study)
    pairs = []
    for pk, keys in items:
        for question in questions if not keys else [q for q in questions if q.key in keys]:
            labels = by_item.get((pk, question.pk), [])
            if (pk, question.pk) not in settled and len(labels) >= study.labels_per_item:
                pairs.append((pk, question.pk))
    return by_item, pairs


def dispute_pairs(*, study: Study) -> list[tuple[int, int]]:
    """Every disputed (item id, question id) of the study, oldest item first (pages: ``dispute_queue``)."""
    items = [(pk, keys or []) for pk, keys in _disputed_items(study).values_list("pk", "question_keys")]
    return _disputed_pairs(study, items)[1]


def dispute_queue(
    *, study: Study, limit: int | None = None, item_ids: list[int] | None = None
) -> list[DisputeRow]:
    """Disputed (item, question) pairs with their labels, oldest item first; only ``item_ids``' if given."""
    disputed = _disputed_items(study)
    if item_ids is not None:
        disputed = disputed.filter(pk__in=item_ids)
    disputed = disputed.select_related("prompt", "study")
    items = list(disputed if limit is None else disputed[:limit])
    if not items:
        return []
    # Without a limit, every disputed item: their images are read a chunk at a time.
    images_load(items)
    by_item, pairs = _disputed_pairs(study, [(item.pk, item.question_keys or []) for item in items])
    by_id = {item.pk: item for item in items}
    questions = {question.pk: question for question in study_questions(study)}
    return [
        DisputeRow(
            item=by_id[item_id],
            question=questions[question_id],
            labels=by_item[(item_id, question_id)],
            n_needed=study.labels_per_item,
        )
        for item_id, question_id in pairs
    ]


def annotator_progress(*, study: Study, annotator: User, now: datetime | None = None) -> Progress:
    """(done, remaining) for the annotator, in one indexed query."""
    sql, params = progress_statement(study=study, annotator=annotator, now=now or timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return progress_from_counts(cursor.fetchone())


#: The count cap of this request's progress when a caller set one (``progress_counted_up_to``).
_count_cap: ContextVar[int | None] = ContextVar("progress_count_cap", default=None)


@contextmanager
def progress_counted_up_to(cap: int) -> Iterator[None]:
    """Within it, progress counts the items left to take only up to ``cap`` (instead of
    ``PROGRESS_COUNT_CAP``): a panel participant's quota, so their key press reads a few rows."""
    token = _count_cap.set(cap)
    try:
        yield
    finally:
        _count_cap.reset(token)


def _progress_cap() -> int:
    return _count_cap.get() or rows.PROGRESS_COUNT_CAP


def progress_statement(*, study: Study, annotator: User, now: datetime) -> tuple[str, dict[str, Any]]:
    """The progress counts' statement (one row ``done, open_seats, claimable``) and its parameters."""
    return rows.progress(), {
        "user": annotator.pk,
        "study": study.pk,
        "n": study.labels_per_item,
        "now": connection.ops.adapt_datetimefield_value(now),
        "resolved": str(FinalLabelSource.RESOLVED),
        "imported": str(FinalLabelSource.IMPORTED),
        "cap": _progress_cap() + 1,
    }


def progress_from_counts(counts: Any) -> Progress:
    """Progress from the first three columns of ``progress_statement``'s row."""
    done, open_seats, claimable = counts[:3]
    cap = _progress_cap()
    return Progress(done=done, remaining=open_seats + min(claimable, cap), more=claimable > cap)


def _final_label_dict(final: FinalLabel | FinalLabelRevision, question: Question) -> dict[str, Any]:
    return {
        "value": final.value,
        "display": question.display(final.value) if final.value else "",
        # Removals written before the source was recorded ("") were of agreed labels.
        "source": final.source or FinalLabelSource.AGREED,
        "decided_by": final.decided_by.username if final.decided_by else None,
        "note": final.note,
        "decided_at": final.decided_at,
        # A truth-inference model's probability of the answer (final labels only; None otherwise).
        "posterior": getattr(final, "posterior", None),
    }


def item_detail(*, item: Item) -> dict[str, Any]:
    """Everything a researcher sees about one item: images, state, labels, final labels and history."""
    study = item.study
    questions = item_questions(item, study_questions(study))
    by_id = {q.pk: q for q in study_questions(study)}
    labels = list(Label.objects.filter(item=item).select_related("annotator").order_by("id"))
    finals = {f.question_id: f for f in FinalLabel.objects.filter(item=item).select_related("decided_by")}
    label_history = LabelRevision.objects.filter(label__item=item).select_related(
        "label__annotator", "changed_by", "label"
    )
    final_history = FinalLabelRevision.objects.filter(item=item).select_related("decided_by")
    states = item_question_states(item)
    per_question = [
        {
            "question": question,
            "state": states.get(question.key, ItemState.UNLABELLED),
            "labels": [
                {
                    "annotator": label.annotator.username,
                    "value": label.value,
                    "display": question.display(label.value),
                    "reason": label.reason,
                    "duration_ms": label.duration_ms,
                    "created_at": label.created_at,
                    "updated_at": label.updated_at,
                }
                for label in labels
                if label.question_id == question.pk
            ],
            "final_label": _final_label_dict(finals[question.pk], question)
            if question.pk in finals
            else None,
        }
        for question in questions
    ]
    return {
        "item": item,
        "images": {link.role: link for link in item.item_images.select_related("image")},
        "state": item_state(item),
        "questions": per_question,
        "label_history": [
            {
                "question": by_id[rev.label.question_id].key,
                "annotator": rev.label.annotator.username,
                "value": rev.value,
                "display": by_id[rev.label.question_id].display(rev.value),
                "reason": rev.reason,
                "changed_by": rev.changed_by.username,
                "changed_at": rev.changed_at,
            }
            for rev in label_history
        ],
        "final_label_history": [
            {"question": by_id[rev.question_id].key, **_final_label_dict(rev, by_id[rev.question_id])}
            for rev in final_history
        ],
    }


def annotator_stats(*, study: Study) -> list[AnnotatorStats]:
    """Per annotator of the study: items labelled, median seconds per item, agreement with the finals."""
    final_value = FinalLabel.objects.filter(item=OuterRef("item"), question=OuterRef("question")).values(
        "value"
    )[:1]
    rows = (
        Label.objects.filter(item__study=study)
        .annotate(final_value=Subquery(final_value))
        .values_list("annotator__username", "item_id", "duration_ms", "value", "final_value")
    )
    per_user: dict[str, dict[str, Any]] = {
        username: {"durations": {}, "matches": [], "items": set()}
        for username in study.annotators.values_list("username", flat=True)
    }
    for username, item_id, duration_ms, value, final in rows:
        bucket = per_user.setdefault(username, {"durations": {}, "matches": [], "items": set()})
        bucket["items"].add(item_id)
        if duration_ms is not None:
            bucket["durations"][item_id] = duration_ms / 1000
        if final:
            bucket["matches"].append(value == final)
    return [
        AnnotatorStats(
            username=username,
            labels_done=len(bucket["items"]),
            median_seconds=statistics.median(bucket["durations"].values()) if bucket["durations"] else None,
            agreement_with_final=(
                sum(bucket["matches"]) / len(bucket["matches"]) if bucket["matches"] else None
            ),
            answers_with_final=len(bucket["matches"]),
        )
        for username, bucket in sorted(per_user.items())
    ]


def study_for_labeling(*, user: User, slug: str) -> Study | None:
    """The study ``slug`` if ``user`` annotates it (else None), its questions loaded, in one query."""
    sql = rows.labeling_study()
    with connection.cursor() as cursor:
        cursor.execute(sql, {"slug": slug, "user": user.pk})
        row = cursor.fetchone()
    if row is None:
        return None
    study = rows.from_row(Study, row)
    # JSON already decoded (the aggregate's), so the values go in as they are.
    questions = [
        Question.from_db(connection.alias, None, values)  # type: ignore[arg-type]  # None: every field
        for values in rows.json_value(row[-1])
    ]
    questions.sort(key=lambda question: (question.position, question.pk))
    study._questions_cache = questions  # type: ignore[attr-defined]  # as study_questions caches them
    return study


def studies_for_annotator(*, user: User) -> QuerySet[Study]:
    """Studies the user may label, by name."""
    return Study.objects.filter(annotators=user).order_by("name")


def label_rows_for_agreement(
    *,
    study: Study,
    question: Question | None = None,
    t2i_model: str | None = None,
    category: str | None = None,
) -> list[tuple[int, str, str, str, str]]:
    """(item_id, t2i_model, category, annotator, value) of each label of ``question``, by item, annotator."""
    question = question or study_questions(study)[0]
    wanted = {"item__t2i_model": t2i_model, "item__prompt__category": category}
    labels = Label.objects.filter(item__study=study, question=question)
    return list(
        labels.filter(**{lookup: value for lookup, value in wanted.items() if value})
        .order_by("item_id", "annotator_id")
        .values_list("item_id", "item__t2i_model", "item__prompt__category", "annotator__username", "value")
    )
