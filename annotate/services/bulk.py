"""Labels from an import file a batch at a time, ``label_import``'s rules in memory (docs/explanation)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from annotate import sql
from annotate.errors import AnnotateError, InvalidLabel, ItemFull
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, FinalLabelSource, Label, LabelRevision
from annotate.services.answers import answer_validate, clean_reason
from annotate.services.claims import free_slot
from annotate.services.finals import agreed_change, refuse_if_decided
from annotate.services.labels import label_import
from studies.batching import chunk_rows, in_chunks, is_in, rows_insert
from studies.kinds import kind_of
from studies.models import Item, Question, Study
from studies.selectors import item_questions, study_questions

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Outcome = Literal["created", "changed", "unchanged"] | AnnotateError


@dataclass(frozen=True)
class LabelToImport:
    """One row of an import: its item (study loaded), question, annotator, answer and reason."""

    item: Item
    question: Question
    annotator: User
    value: str
    reason: str = ""


@dataclass
class _Seat:
    pk: int | None
    annotator_id: int
    slot: int
    completed_at: datetime | None
    expires_at: datetime


@dataclass
class _Label:
    pk: int | None
    item_id: int
    question_id: int
    annotator_id: int
    value: str
    reason: str


@dataclass
class _Final:
    pk: int | None
    value: str
    source: str
    note: str = ""
    decided_by_id: int | None = None


@dataclass
class _Batch:
    """The batch's rows of the database, read once as plain values, and what the rows change in them."""

    labels: dict[tuple[int, int], dict[int, _Label]] = field(default_factory=lambda: defaultdict(dict))
    seats: dict[int, list[_Seat]] = field(default_factory=lambda: defaultdict(list))
    finals: dict[tuple[int, int], _Final | None] = field(default_factory=dict)
    finals_before: dict[tuple[int, int], int] = field(default_factory=dict)  # (item, question) -> pk
    finals_touched: set[tuple[int, int]] = field(default_factory=set)
    new_labels: list[_Label] = field(default_factory=list)
    changed_labels: dict[int, _Label] = field(default_factory=dict)
    revisions: list[tuple[_Label, str, str, int]] = field(default_factory=list)  # label, value, reason, by
    # item, question, value, note — every one agreed and by no one
    final_revisions: list[tuple[int, int, str, str]] = field(default_factory=list)
    new_seats: list[tuple[int, _Seat]] = field(default_factory=list)  # item id, seat
    seats_completed: list[int] = field(default_factory=list)
    seats_abandoned: list[int] = field(default_factory=list)
    touched_items: set[int] = field(default_factory=set)
    members: dict[int, User] = field(default_factory=dict)


class _SlotTaken(Exception):
    """A concurrent claim took a slot this batch chose: replay the batch row by row."""


def labels_import_batch(
    *, study: Study, rows: list[LabelToImport], labels_read: list[tuple[Any, ...]] | None = None
) -> list[Outcome]:
    """Store a batch of answers as ``label_import`` would one by one: per row its outcome or error."""
    if not rows:
        return []
    if connection.vendor == "postgresql":
        labels_read = None
    try:
        with transaction.atomic():
            return _apply(study, rows, labels_read)
    except _SlotTaken:
        return _row_by_row(rows)


def _row_by_row(rows: list[LabelToImport]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for row in rows:
        before = Label.objects.filter(item=row.item, question=row.question, annotator=row.annotator).first()
        try:
            label = label_import(
                item=row.item,
                question=row.question,
                annotator=row.annotator,
                value=row.value,
                reason=row.reason,
            )
        except AnnotateError as exc:
            outcomes.append(exc)
            continue
        if before is None:
            outcomes.append("created")
        elif (before.value, before.reason) == (label.value, label.reason):
            outcomes.append("unchanged")
        else:
            outcomes.append("changed")
    return outcomes


def _read(study: Study, item_ids: list[int], labels_read: list[tuple[Any, ...]] | None) -> _Batch:
    """Lock the items (in id order, a chunk at a time), then read their labels, seats and final labels."""
    batch = _Batch()
    if connection.features.has_select_for_update:  # SQLite: no row locks, its writes are serial
        list(chunk_rows(sql.import_items_lock, item_ids, "id"))
    for row in chunk_rows(sql.import_labels, item_ids, "item_id") if labels_read is None else labels_read:
        label = _Label(*row)
        batch.labels[(label.item_id, label.question_id)][label.annotator_id] = label
    seat_times = sql.converter(Assignment, ["completed_at", "expires_at"])
    for pk, item_id, annotator_id, slot, *times in chunk_rows(sql.import_seats, item_ids, "item_id"):
        batch.seats[item_id].append(_Seat(pk, annotator_id, slot, *seat_times(times)))
    for pk, item_id, question_id, *final in chunk_rows(sql.import_finals, item_ids, "item_id"):
        batch.finals[(item_id, question_id)] = _Final(pk, *final)
        batch.finals_before[(item_id, question_id)] = pk
    return batch


def _apply(
    study: Study, rows: list[LabelToImport], labels_read: list[tuple[Any, ...]] | None
) -> list[Outcome]:
    # ``.id``, not ``.pk``, below: ``pk`` is a property, slow at eleven reads a label.
    batch = _read(study, sorted({row.item.id for row in rows}), labels_read)
    now = timezone.now()  # after the lock (see annotation_submit_next)
    questions = study_questions(study)
    asked: dict[int, set[int]] = {}  # item id -> ids of the questions it asks
    answers = _Answers()
    outcomes: list[Outcome] = []
    study_id = study.id
    for row in rows:
        item, question = row.item, row.question
        item_id = item.id
        if item_id not in asked:
            asked[item_id] = {q.id for q in item_questions(item, questions)}
        try:
            # question.id in the ids: ``question in item_questions(…)`` (models compare by pk).
            if question.study_id != study_id or question.id not in asked[item_id]:
                raise InvalidLabel(f"The item {item.key} does not ask the question “{question.key}”.")
            outcomes.append(_row_apply(study, batch, row, item_id, answers, now))
        except AnnotateError as exc:
            outcomes.append(exc)
    _write(study, batch, now)
    return outcomes


class _Answers:
    """``answer_validate`` and ``clean_reason`` of a row, remembered for the batch where that is safe."""

    def __init__(self) -> None:
        # Keyed by the question object itself (its identity): the rows hold it for the batch.
        self.known: dict[tuple[int, str, str], tuple[str, str]] = {}

    def clean(self, question: Question, raw: str, reason: str, item: Item) -> tuple[str, str]:
        key = (id(question), raw, reason)
        found = self.known.get(key)
        if found is None:
            value = answer_validate(question, raw, item=item)
            found = (value, clean_reason(question, value, reason))
            if not kind_of(question).reads_item:
                self.known[key] = found
        return found


def _row_apply(
    study: Study, batch: _Batch, row: LabelToImport, item_id: int, answers: _Answers, now: datetime
) -> Outcome:
    """One row in memory, as ``label_import`` writes it; raises what it raises, having changed nothing."""
    item, question, annotator = row.item, row.question, row.annotator
    question_id, annotator_id = question.id, annotator.id
    value, reason = answers.clean(question, row.value, row.reason, item)
    here = batch.labels[(item_id, question_id)]
    mine = here.get(annotator_id)
    if mine is not None and (mine.value, mine.reason) == (value, reason):
        return "unchanged"
    final = batch.finals.get((item_id, question_id))
    if final is not None and final.source != FinalLabelSource.AGREED:
        refuse_if_decided(item, question, FinalLabel(value=final.value, source=final.source))
    _seat_take(study, batch, item, item_id, annotator_id, now)
    batch.members[annotator_id] = annotator
    batch.touched_items.add(item_id)
    if mine is None:
        mine = _Label(None, item_id, question_id, annotator_id, value, reason)
        here[annotator_id] = mine
        batch.new_labels.append(mine)
        outcome: Outcome = "created"
    else:
        mine.value, mine.reason = value, reason
        if mine.pk is not None:
            batch.changed_labels[mine.pk] = mine
        outcome = "changed"
    batch.revisions.append((mine, value, reason, annotator_id))
    values = [label.value for other, label in here.items() if other != annotator_id] + [value]
    _final_sync(study, batch, item_id, question_id, values, annotator)
    return outcome


def _seat_take(
    study: Study, batch: _Batch, item: Item, item_id: int, annotator_id: int, now: datetime
) -> None:
    """The annotator's seat on the item, completed: theirs, else the lowest free slot; ItemFull otherwise."""
    seats = batch.seats[item_id]
    seat = next((one for one in seats if one.annotator_id == annotator_id), None)
    if seat is None:
        n = study.labels_per_item
        slot, abandoned = free_slot([(s.slot, s.completed_at, s.expires_at) for s in seats], n, now)
        gone = [s for s in seats if s.completed_at is None and s.expires_at <= now] if abandoned else []
        if slot is None:
            # As label_import: the abandoned seats freed, no slot; the holders named are the seats left.
            ids = [s.annotator_id for s in sorted(seats, key=lambda s: s.slot) if s not in gone]
            names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
            holders = ", ".join(names[pk] for pk in ids)
            raise ItemFull(f"Item {item.key} already has its {study.labels_per_item} annotators ({holders}).")
        if gone:
            batch.seats_abandoned += [s.pk for s in gone if s.pk is not None]
            seats[:] = [s for s in seats if s not in gone]
        seat = _Seat(None, annotator_id, slot, now, now)
        seats.append(seat)
        batch.new_seats.append((item_id, seat))
    elif seat.completed_at is None:
        seat.completed_at = now
        if seat.pk is not None:
            batch.seats_completed.append(seat.pk)


def _final_sync(
    study: Study, batch: _Batch, item_id: int, question_id: int, values: list[str], by: User
) -> None:
    """``finals.final_label_sync`` in memory: the same end state and the same revisions."""
    key = (item_id, question_id)
    final = batch.finals.get(key)
    change = agreed_change(study, final, values, by)
    if change is None:
        return
    value, note = change
    batch.finals_touched.add(key)
    batch.final_revisions.append((item_id, question_id, value or "", note))
    if value is None:
        batch.finals[key] = None
    elif final is None:
        batch.finals[key] = _Final(None, value, FinalLabelSource.AGREED, note)
    else:
        final.value, final.source, final.decided_by_id, final.note = (
            value,
            FinalLabelSource.AGREED,
            None,
            note,
        )


def _write(study: Study, batch: _Batch, now: datetime) -> None:
    """What the rows changed, one bulk statement per kind (split under the variable limit)."""
    at = now  # every row of the batch carries this time
    for chunk in in_chunks(batch.seats_abandoned):
        # The same condition as claims._abandoned_free: a seat completed meanwhile stays.
        Assignment.objects.filter(pk__in=chunk, completed_at__isnull=True, expires_at__lte=now).delete()
    for chunk in in_chunks(batch.seats_completed):
        Assignment.objects.filter(pk__in=chunk).update(completed_at=now)
    try:
        with transaction.atomic():
            rows_insert(
                Assignment,
                ("item_id", "annotator_id", "slot", "claimed_at", "expires_at", "completed_at"),
                [(item_id, seat.annotator_id, seat.slot, at, at, at) for item_id, seat in batch.new_seats],
            )
    except IntegrityError as exc:
        raise _SlotTaken from exc
    if batch.members:
        study.annotators.add(*batch.members.values())
    ids = rows_insert(
        Label,
        sql.LABEL_FIELDS,
        [
            (x.item_id, x.question_id, x.annotator_id, x.value, x.reason, None, "", at, at)
            for x in batch.new_labels
        ],
        returning=True,
    )
    for label, pk in zip(batch.new_labels, ids, strict=True):
        label.pk = pk
    changed: dict[tuple[str, str], list[int]] = defaultdict(list)
    for pk, label in batch.changed_labels.items():
        changed[(label.value, label.reason)].append(pk)
    for (value, reason), pks in changed.items():  # a few answers: a few statements
        for chunk in in_chunks(pks):
            Label.objects.filter(pk__in=chunk).update(
                value=value, reason=reason, request_id="", updated_at=now
            )
    rows_insert(
        LabelRevision,
        sql.LABEL_REVISION_FIELDS,
        [(label.pk, value, reason, by, at, "") for label, value, reason, by in batch.revisions],
    )
    _finals_write(batch, at, now)
    _completed_seats_write(batch)


def _finals_write(batch: _Batch, at: Any, now: datetime) -> None:
    """The final labels as the rows left them (deleted, updated, inserted), then every revision in order."""
    touched = {key: batch.finals.get(key) for key in batch.finals_touched}
    gone = [
        pk
        for key, final in touched.items()
        if (pk := batch.finals_before.get(key)) is not None and (final is None or final.pk != pk)
    ]
    for chunk in in_chunks(gone):
        FinalLabel.objects.filter(pk__in=chunk).delete()
    changed: dict[tuple[str, str], list[int]] = defaultdict(list)
    new: list[tuple[int, int, str, str]] = []
    for (item_id, question_id), final in touched.items():
        if final is not None and final.pk is not None:
            changed[(final.value, final.note)].append(final.pk)
        elif final is not None:
            new.append((item_id, question_id, final.value, final.note))
    for (value, note), pks in changed.items():
        for chunk in in_chunks(pks):
            FinalLabel.objects.filter(pk__in=chunk).update(
                value=value, source=FinalLabelSource.AGREED, decided_by=None, note=note, decided_at=now
            )
    agreed = FinalLabelSource.AGREED.value
    rows_insert(
        FinalLabel, sql.FINAL_FIELDS, [(i, q, value, agreed, None, note, at) for i, q, value, note in new]
    )
    rows_insert(
        FinalLabelRevision,
        sql.FINAL_FIELDS,
        [(i, q, value, agreed, None, note, at) for i, q, value, note in batch.final_revisions],
    )


def _completed_seats_write(batch: _Batch) -> None:
    """Each touched item's count of completed seats: one UPDATE per count and chunk."""
    by_count: dict[int, list[int]] = defaultdict(list)
    for item_id in sorted(batch.touched_items):
        by_count[sum(1 for seat in batch.seats[item_id] if seat.completed_at is not None)].append(item_id)
    with connection.cursor() as cursor:
        for count, item_ids in sorted(by_count.items()):
            for chunk in in_chunks(item_ids):
                where, params = is_in("id", chunk)
                cursor.execute(sql.completed_seats_set(where), [count, *params])
