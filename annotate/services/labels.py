"""Labels: an annotator's answers to an item's questions, with their history. Every write takes the
item lock first (``locks``), writes labels and revisions, then syncs the agreed finals (``finals``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from annotate import sql as rows
from annotate.errors import InvalidLabel, ItemFull, NotAssigned, NothingToUndo, StaleSubmit
from annotate.models import Assignment, FinalLabel, Label, LabelRevision
from annotate.selectors import DECIDED_SOURCES, Progress
from annotate.services import gold, locks
from annotate.services.answers import (
    Answer,
    answer_validate,
    answers_validate,
    clean_reason,
    duration_validate,
)
from annotate.services.claims import queue_fill, seat_complete, seat_complete_reading, seat_try_claim
from annotate.services.finals import final_label_sync, refuse_if_decided
from studies.models import Item, Question, Study
from studies.selectors import item_questions, study_questions

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import WithAnnotations


def _labels_write(
    *,
    item: Item,
    annotator: User,
    answers: list[Answer],
    existing: Mapping[int, Label],
    duration_ms: int | None,
    request_id: str,
    now: datetime,
) -> list[Label]:
    """Create or change the annotator's label on each answer that changed, one revision per
    change (caller holds the item lock); on PostgreSQL one statement."""
    created: list[Label] = []
    revisions: list[LabelRevision] = []
    result: list[Label] = []
    for answer in answers:
        label = existing.get(answer.question.pk)
        if label is not None:
            if (label.value, label.reason) != (answer.value, answer.reason):
                label.value, label.reason, label.request_id = answer.value, answer.reason, request_id
                # The first duration stays: it is the time the annotator needed to decide, which
                # a later correction after "go back" does not measure.
                label.save(update_fields=["value", "reason", "request_id", "updated_at"])
                revisions.append(
                    LabelRevision(
                        label=label,
                        value=answer.value,
                        reason=answer.reason,
                        changed_by=annotator,
                        changed_at=now,
                        request_id=request_id,
                    )
                )
            result.append(label)
            continue
        label = Label(
            item=item,
            question=answer.question,
            annotator=annotator,
            value=answer.value,
            reason=answer.reason,
            duration_ms=duration_ms,
            request_id=request_id,
            created_at=now,
            updated_at=now,
        )
        created.append(label)
        result.append(label)
    if created and not revisions and rows.is_postgresql():
        _labels_insert_with_revisions(created, annotator=annotator, request_id=request_id, now=now)
        return result
    if created:
        with connection.cursor() as cursor:
            cursor.execute(*rows.labels_insert(created, rows.LABEL_FIELDS))
            for label, (pk,) in zip(created, cursor.fetchall(), strict=True):
                label.pk = pk
        revisions += [
            LabelRevision(
                label=label,
                value=label.value,
                reason=label.reason,
                changed_by=annotator,
                changed_at=now,
                request_id=request_id,
            )
            for label in created
        ]
    if revisions:
        sql, params = rows.insert(LabelRevision, rows.LABEL_REVISION_FIELDS, revisions)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return result


def _labels_insert_with_revisions(
    labels: list[Label], *, annotator: User, request_id: str, now: datetime
) -> None:
    """PostgreSQL: insert new labels and their first revisions in one statement."""
    sql, params = rows.insert(Label, rows.LABEL_FIELDS, labels)
    with connection.cursor() as cursor:
        cursor.execute(rows.labels_with_revisions(sql), [*params, annotator.pk, now, request_id])
        ids = dict(cursor.fetchall())
    for label in labels:
        label.pk = ids[label.question_id]


def _is_repeat(existing: Mapping[int, Label], answers: list[Answer], request_id: str) -> bool:
    """A double key press or retried POST (same answers, or an earlier request id with the
    answers it stored): nothing to store. The same request id with other answers is a
    Back-button resubmit, which the caller refuses."""
    if not existing:
        return False
    if all(
        (label := existing.get(a.question.pk)) is not None
        and (label.value, label.reason) == (a.value, a.reason)
        for a in answers
    ):
        return True
    if not request_id:
        return False
    history = LabelRevision.objects.filter(label__in=list(existing.values())).order_by("id")
    revisions = list(history.values_list("id", "label_id", "value", "reason", "request_id"))
    theirs = [pk for pk, _, _, _, rid in revisions if rid == request_id]
    if not theirs:
        return False
    # The labels as that request left them: each one's last revision up to the request's own.
    then = {label_id: (value, reason) for pk, label_id, value, reason, _ in revisions if pk <= max(theirs)}
    return all(
        (label := existing.get(a.question.pk)) is not None and then.get(label.pk) == (a.value, a.reason)
        for a in answers
    )


def _submit(
    *,
    item: WithAnnotations[Item, locks.Membership],
    annotator: User,
    answers: Mapping[str, str],
    reasons: Mapping[str, str] | None,
    duration_ms: int | None,
    request_id: str,
    change: bool,
    seen_revision: int | None,
    now: datetime,
) -> list[Label]:
    """annotation_submit on an item locked by ``locks.lock_item_for_label``. The first answer on
    an open seat costs three statements after the lock (docs/explanation/key-press.md); every
    other case reads what it needs with the ORM."""
    study = item.study
    if not item.annotator_is_member:
        raise locks.not_member(study, annotator)
    questions = item_questions(item, study_questions(study))
    cleaned = answers_validate(item, questions, answers, reasons)
    duration_ms = duration_validate(duration_ms)
    request_id = (request_id or "")[:64]
    # Queue 0: an item out of the ordinary queue, gold items among them (annotate.services.gold);
    # the ordinary key press never gets here.
    if item.queue == 0 and (golds := gold.gold_values(item)):
        locks.seat_uncount(item)
        if not gold.gold_response_write(
            item=item, annotator=annotator, golds=golds, answers=cleaned, duration_ms=duration_ms, now=now
        ):
            raise NotAssigned(f"Item {item.key} is not assigned to {annotator.get_username()}.")
        return []
    opened, seen, n_finals = seat_complete_reading(item=item, annotator=annotator, now=now)
    existing: dict[int, Label] = {}
    key_press = opened and all(annotator_id != annotator.pk for _, annotator_id, _ in seen)
    if key_press:
        # The usual key press: an open seat, none of the annotator's labels yet.
        others = [(question_id, value) for question_id, _, value in seen]
    else:
        if not opened:
            locks.seat_uncount(item)
            if not Assignment.objects.filter(item=item, annotator=annotator).exists():
                raise NotAssigned(
                    f"Item {item.key} is not assigned to {annotator.get_username()} "
                    "(never handed out to you, or your reservation expired and went back to the pool)."
                )
        labels = list(Label.objects.filter(item=item))
        existing = {label.question_id: label for label in labels if label.annotator_id == annotator.pk}
        others = [(label.question_id, label.value) for label in labels if label.annotator_id != annotator.pk]
        if _is_repeat(existing, cleaned, request_id):
            return [existing[a.question.pk] for a in cleaned]  # double submit: already stored
        if not opened:
            # The seat was completed before: only an explicit change (undo / go back) may alter
            # the labels, and only from a form drawn on the labels as they still are.
            if not change:
                raise StaleSubmit(
                    f"Item {item.key} was already labelled — reload to get your current item "
                    "(nothing was changed)."
                )
            if seen_revision is not None and seen_revision != _revision_stamp(existing.values()):
                raise StaleSubmit(
                    f"Your labels on item {item.key} changed since this page was drawn — reload "
                    "(nothing was changed)."
                )
    # The key press counted the final labels already: none (the usual case) needs no query.
    finals = (
        {final.question_id: final for final in FinalLabel.objects.filter(item=item)}
        if n_finals or not key_press
        else {}
    )
    for answer in cleaned:
        refuse_if_decided(item, answer.question, finals.get(answer.question.pk))
    written = _labels_write(
        item=item,
        annotator=annotator,
        answers=cleaned,
        existing=existing,
        duration_ms=duration_ms,
        request_id=request_id,
        now=now,
    )
    for answer in cleaned:
        values = [value for question_id, value in others if question_id == answer.question.pk] + [
            answer.value
        ]
        final_label_sync(
            item=item,
            study=study,
            question=answer.question,
            final=finals.get(answer.question.pk),
            values=values,
            changed_by=annotator,
            now=now,
        )
    return written


def _revision_stamp(labels: object) -> int:
    """A number that changes whenever one of these labels changes: the sum of their ids and
    update times is enough to tell a stale form from a current one."""
    return sum(label.pk + int(label.updated_at.timestamp() * 1000) for label in labels)  # type: ignore[attr-defined]


def label_revision_stamp(*, item: Item, annotator: User) -> int:
    """The stamp of the annotator's labels on the item, to draw into a change form."""
    return _revision_stamp(Label.objects.filter(item=item, annotator=annotator))


@transaction.atomic
def annotation_submit(
    *,
    item: Item,
    annotator: User,
    answers: Mapping[str, str],
    reasons: Mapping[str, str] | None = None,
    duration_ms: int | None = None,
    request_id: str = "",
    change: bool = False,
    seen_revision: int | None = None,
) -> list[Label]:
    """Save the annotator's answers ({question key: value}) to the item's questions and sync its
    final labels; ``change=True`` edits a completed seat unless ``seen_revision`` is stale. A repeat
    stores nothing. Raises NotAssigned, InvalidLabel, StaleSubmit, AlreadyResolved."""
    locked = locks.lock_item_for_label(item_id=item.pk, annotator=annotator)
    return _submit(
        item=locked,
        annotator=annotator,
        answers=answers,
        reasons=reasons,
        duration_ms=duration_ms,
        request_id=request_id,
        change=change,
        seen_revision=seen_revision,
        now=timezone.now(),  # after the lock (see annotation_submit_next)
    )


@dataclass(frozen=True)
class SubmitNext:
    """What the labeling screen needs after a key press: the labels saved, the queue and the
    annotator's progress (counted in the same transaction, after the labels)."""

    labels: list[Label]
    queue: list[Assignment]
    progress: Progress


@transaction.atomic
def annotation_submit_next(
    *,
    study: Study,
    annotator: User,
    item_id: int,
    answers: Mapping[str, str],
    reasons: Mapping[str, str] | None = None,
    duration_ms: int | None = None,
    request_id: str = "",
    change: bool = False,
    seen_revision: int | None = None,
    size: int = 2,
) -> SubmitNext:
    """The labeling screen's key press: ``annotation_submit`` then ``assignment_queue`` in one
    transaction. Same errors, plus Item.DoesNotExist for an item outside the study."""
    item = locks.lock_item_for_label(item_id=item_id, annotator=annotator, study=study)
    # The time of the labels, revisions and final labels written: read once the item lock is
    # granted, so that history sorted by time follows the order in which the writes happened.
    now = timezone.now()
    labels = _submit(
        item=item,
        annotator=annotator,
        answers=answers,
        reasons=reasons,
        duration_ms=duration_ms,
        request_id=request_id,
        change=change,
        seen_revision=seen_revision,
        now=now,
    )
    queue, progress = queue_fill(study=study, annotator=annotator, size=size, now=now, gold=True)
    return SubmitNext(labels=labels, queue=queue, progress=progress)


@transaction.atomic
def label_change(
    *,
    label: Label,
    annotator: User,
    value: str | None = None,
    reason: str | None = None,
    request_id: str = "",
) -> Label:
    """Change one of the annotator's labels (the API's PUT/PATCH); None keeps the stored value
    or reason. Other answers on the item are untouched, so concurrent changes to different
    questions both last. Raises NotAssigned, InvalidLabel, AlreadyResolved."""
    item = locks.lock_item(Item(pk=label.item_id))
    now = timezone.now()  # after the lock (see annotation_submit_next)
    current = Label.objects.select_related("question").get(pk=label.pk)
    if current.annotator_id != annotator.pk:
        raise NotAssigned("Only the annotator who gave a label may change it.")
    locks.require_member(item.study, annotator)
    question = current.question
    new_value = answer_validate(question, current.value if value is None else value, item=item)
    new_reason = clean_reason(question, new_value, current.reason if reason is None else reason)
    if (new_value, new_reason) == (current.value, current.reason):
        return current
    final = FinalLabel.objects.filter(item=item, question=question).first()
    refuse_if_decided(item, question, final)
    [written] = _labels_write(
        item=item,
        annotator=annotator,
        answers=[Answer(question, new_value, new_reason)],
        existing={question.pk: current},
        duration_ms=None,
        request_id=(request_id or "")[:64],
        now=now,
    )
    others = Label.objects.filter(item=item, question=question).exclude(annotator=annotator)
    final_label_sync(
        item=item,
        study=item.study,
        question=question,
        final=final,
        values=[*others.values_list("value", flat=True), new_value],
        changed_by=annotator,
        now=now,
    )
    return written


@transaction.atomic
def annotation_previous(*, study: Study, annotator: User, before: Item | None = None) -> Item:
    """The item the annotator labelled just before ``before`` (their latest when None): the "go
    back one" key. Items with a fixed final label are skipped. Raises NotAssigned,
    NothingToUndo."""
    locks.require_member(study, annotator)
    decided = FinalLabel.objects.filter(item=OuterRef("item"), source__in=DECIDED_SOURCES)
    seats = (
        Assignment.objects.filter(item__study=study, annotator=annotator, completed_at__isnull=False)
        .exclude(Exists(decided))
        .order_by("-completed_at", "-id")
    )
    if before is not None:
        anchor = Assignment.objects.filter(
            item=before, annotator=annotator, completed_at__isnull=False
        ).first()
        if anchor is not None:
            seats = seats.filter(completed_at__lte=anchor.completed_at).exclude(pk=anchor.pk)
            seats = seats.exclude(completed_at=anchor.completed_at, id__gt=anchor.pk)
    seat = seats.select_related("item__prompt").first()
    if seat is None:
        raise NothingToUndo("There is no earlier label of yours to go back to.")
    seat.item.study = study
    return seat.item


@transaction.atomic
def label_import(*, item: Item, question: Question, annotator: User, value: str, reason: str = "") -> Label:
    """Store one imported answer: a completed seat for the annotator, then validate, write and
    sync as a submit does; idempotent. Raises ItemFull, InvalidLabel, AlreadyResolved."""
    item = locks.lock_item(item)
    now = timezone.now()  # after the lock (see annotation_submit_next)
    study = item.study
    if question.study_id != study.pk or question not in item_questions(item, study_questions(study)):
        raise InvalidLabel(f"The item {item.key} does not ask the question “{question.key}”.")
    value = answer_validate(question, value, item=item)
    reason = clean_reason(question, value, reason)
    labels = list(Label.objects.filter(item=item, question=question))
    existing = next((label for label in labels if label.annotator_id == annotator.pk), None)
    if existing is not None and (existing.value, existing.reason) == (value, reason):
        return existing
    final = FinalLabel.objects.filter(item=item, question=question).first()
    refuse_if_decided(item, question, final)
    study.annotators.add(annotator)
    seat = Assignment.objects.filter(item=item, annotator=annotator).first()
    if seat is None:
        seat = seat_try_claim(
            item=item,
            annotator=annotator,
            n=study.labels_per_item,
            now=now,
            expires_at=now,
            completed=True,
        )
        if seat is None:
            holders = ", ".join(
                Assignment.objects.filter(item=item)
                .order_by("slot")
                .values_list("annotator__username", flat=True)
            )
            raise ItemFull(f"Item {item.key} already has its {study.labels_per_item} annotators ({holders}).")
    seat_complete(seat, now)
    answer = Answer(question, value, reason)
    [label] = _labels_write(
        item=item,
        annotator=annotator,
        answers=[answer],
        existing={question.pk: existing} if existing else {},
        duration_ms=None,
        request_id="",
        now=now,
    )
    values = [other.value for other in labels if other.annotator_id != annotator.pk] + [value]
    final_label_sync(
        item=item, study=study, question=question, final=final, values=values, changed_by=annotator, now=now
    )
    return label
