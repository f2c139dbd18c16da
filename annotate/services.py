"""Writes of the human side: handing out items, saving answers, deciding final labels.

Every function here is one transaction, takes keyword-only arguments and raises the domain
errors of ``annotate.errors`` with a message meant for the user. Every write that changes a
label or a final label appends a revision row recording who and when, so nothing is lost.

An annotator holds a *seat* on an item and answers every question the item asks in one
submit; labels, agreement and final labels are per (item, question).

Concurrency: the unique constraints on ``Assignment`` ((item, slot) and (item, annotator))
are the guarantee that an item never gets more than N annotators. Claiming a seat is "INSERT
the lowest free slot … ON CONFLICT DO NOTHING; if the row did not go in, re-read the slots
and try the next one inside a savepoint, then move on", which behaves the same on SQLite and
PostgreSQL. On PostgreSQL claimers first skip items other claimers hold (SKIP LOCKED), and
every transaction claims in ascending item id, so concurrent claims neither queue behind each
other nor deadlock. Every write that reads an item's labels or final labels takes the item's
row lock FIRST and reads them after it (never before: a final label read before the lock may
be stale by the time the lock is granted), so two annotators changing their answers on the
same item at once each see the other's label. tests/annotate/test_concurrency.py proves both
with threads on PostgreSQL.

Cost: the labeling screen's key press (``annotation_submit_next`` behind
``annotate.views.label_submit``) is a fixed list of hand-written statements, every one of
which builds its model instances from rows (``annotate.sql``) instead of through the ORM,
whose query building cost more CPU than the database spent running them. Per key press:

  1. session (Django; none when sessions are read from a shared Redis, config/settings.py)
  2. user (Django's auth)
  3. the study, the membership check and the study's questions (selectors.study_for_labeling)
  -  BEGIN
  4. item lock: UPDATE of the item counting the annotator's seat as completed, RETURNING the
     item and the membership check (_lock_item_for_label)
  5. seat completed, RETURNING the item's labels and its number of final labels (after the lock)
  6. the new labels                  } one statement on PostgreSQL (a data-modifying WITH)
  7. their revisions                 }
     (+ the agreed final label and its revision when the labels now agree: 2, 1 on PostgreSQL)
  8. claim probe: progress counts, the annotator's open seats, the next claimable items with
     their seats (SKIP LOCKED on PostgreSQL)
  9. the seat INSERT … ON CONFLICT DO NOTHING RETURNING
 10. the open seats with their items, prompts and images
  -  COMMIT

— 12 on SQLite, 11 on PostgreSQL (10 with Redis sessions), BEGIN/COMMIT included; it was 20.
Rare paths add statements (a change or double submit re-reads the labels, a lost claim race or
a queue that the probe could not fill falls back to the search that takes held items too);
tests/annotate/test_views.py pins the common count. bench/bench_label_submit.py measures it:
1,000 images, 2 server processes x 4 threads, 2 cores at load average 0.2-1.1, the old code
measured just before the new one, old → new, p50/p95 (HTTP statements exclude BEGIN/COMMIT):

  ===============================  ============================  ==========================
  figure                           PostgreSQL 15                 SQLite 3.40
  ===============================  ============================  ==========================
  statements, in-process           20 → 11 (Redis sessions: 10)  20 → 12
  statements, HTTP (median)        18 → 9 (Redis sessions: 8)    19 → 11
  server CPU, 1 annotator          25.3/29.8 → 10.4/11.8 ms      18.7/24.3 → 9.3/12.2 ms
                                   (Redis sessions: 9.8/10.6)
  server CPU, 20 annotators        25.3/29.0 → 9.9/11.9 ms       21.8/25.5 → 10.2/11.6 ms
                                   (Redis sessions: 9.5/11.6)
  server time, 20 annotators       46.8/107.8 → 22.2/43.2 ms     24.1/73.4 → 11.2/28.6 ms
                                   (Redis sessions: 20.4/52.7)
  ===============================  ============================  ==========================

Of the remaining CPU (SQLite, in-process, tests' settings): the session and user lookups
(Django's) ~1.4 ms, the study 0.2 ms, the service ~2 ms, rendering the partial ~1 ms; the
production server spends about twice the in-process figure, which is still to be explained.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.utils import timezone

from annotate import sql as rows
from annotate.errors import (
    AlreadyResolved,
    InvalidLabel,
    ItemFull,
    NotAssigned,
    NotDisputed,
    NothingToUndo,
    StaleSubmit,
    UnknownQuestion,
)
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    ItemState,
    Label,
    LabelRevision,
)
from annotate.selectors import (
    DECIDED_SOURCES,
    Progress,
    item_question_states,
    progress_from_counts,
    progress_statement,
)
from metrics.coco_names import UnknownClassName, normalise_class_name
from metrics.consensus import agreed_answer
from studies.models import Image, Item, ItemImage, Prompt, Question, QuestionKind, Study
from studies.selectors import item_questions, study_questions

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import WithAnnotations

REASON_MAX_CHARS = 2000
DURATION_MAX_MS = 2_147_483_647  # PositiveIntegerField's ceiling on every backend
# Contended candidates fetched beyond what is needed: spares absorb seats that other
# annotators take between our SELECT and our INSERT.
CLAIM_SPARE_CANDIDATES = 2


# --- helpers -------------------------------------------------------------------------------


def _require_member(study: Study, user: User) -> None:
    if not study.annotators.filter(pk=user.pk).exists():
        raise _not_member(study, user)


def _not_member(study: Study, user: User) -> NotAssigned:
    return NotAssigned(f"{user.get_username()} is not an annotator of the study “{study.name}”.")


def _lock_item(item: Item) -> Item:
    """Lock the item row for this transaction (a no-op on SQLite, whose writes are serial).

    FOR NO KEY UPDATE: it serialises label writes on one item but does not block seat
    inserts, whose foreign key only takes a KEY SHARE lock on the item.
    """
    return Item.objects.select_for_update(no_key=True, of=("self",)).select_related("study").get(pk=item.pk)


class _Membership(TypedDict):
    annotator_is_member: bool


# The item lock of a label write, as one statement: an UPDATE takes the same row lock as
# SELECT … FOR NO KEY UPDATE (it changes no key column), waits the same way for another writer
# of the item, and returns the item and whether the annotator is a member of its study in the
# same round trip. It counts the annotator's seat as completed in advance (+1): on the key
# press that is what happens; the rare submit that completes no seat (a change, a double
# submit, a refused one) takes it back (``_seat_uncount``) or rolls back. Every writer of
# labels holds this lock, so the counter cannot race.
_LOCK_SQL = """
UPDATE {item} SET completed_seats = completed_seats + 1
WHERE id = %(item)s{in_study}
RETURNING {columns},
  EXISTS (SELECT 1 FROM {members} m WHERE m.{member_study} = {item}.study_id AND m.{member_user} = %(user)s)
"""


def _lock_item_for_label(
    *, item_id: int, annotator: User, study: Study | None = None
) -> WithAnnotations[Item, _Membership]:
    """Lock the item row for a label write, count the annotator's seat on it as completed in
    advance (see ``_LOCK_SQL``), and read ``annotator_is_member`` with it: the hot path of
    every key press checks membership without a query of its own. Raises Item.DoesNotExist
    (also when ``study`` is given and the item is not in it)."""
    members = Study.annotators.through
    sql = rows.statement(
        f"lock-item-{study is None}",
        lambda: _LOCK_SQL.format(
            item=Item._meta.db_table,
            in_study="" if study is None else " AND study_id = %(study)s",
            columns=rows.columns(Item, Item._meta.db_table),
            members=members._meta.db_table,
            member_study=members._meta.get_field("study").column,
            member_user=members._meta.get_field("user").column,
        ),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"item": item_id, "study": study.pk if study else None, "user": annotator.pk})
        row = cursor.fetchone()
    if row is None:
        raise Item.DoesNotExist("No such item" + ("" if study is None else " in this study") + ".")
    item = rows.from_row(Item, row)
    item.annotator_is_member = bool(row[rows.width(Item)])  # type: ignore[attr-defined]
    # With a study given, the caller's study object serves: no query for it.
    item.study = study if study is not None else Study.objects.get(pk=item.study_id)
    return item  # type: ignore[return-value]


def _seat_uncount(item: Item) -> None:
    """Take back the seat ``_lock_item_for_label`` counted in advance: this submit completed
    no seat (it changes labels of a completed one, or repeats a submit)."""
    Item.objects.filter(pk=item.pk).update(completed_seats=F("completed_seats") - 1)


def _clean_reason(question: Question, value: str, reason: str) -> str:
    """The reason stored with ``value``: only an answer that asks for one (``requires_reason``,
    "other") keeps a reason. Any other answer stores none, whatever was sent: a reason typed for
    "other" and still in the form after the annotator went back and pressed F must not end up
    as the reason of "female"."""
    choice = question.choice(value)
    if choice is None or not choice.get("requires_reason"):
        return ""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidLabel(f"The answer “{choice.get('name', value)}” needs a short reason.")
    if len(reason) > REASON_MAX_CHARS:
        raise InvalidLabel(f"The reason is too long ({len(reason)} characters, at most {REASON_MAX_CHARS}).")
    if "\x00" in reason:
        raise InvalidLabel("The reason contains a NUL character.")
    return reason


def answer_validate(question: Question, value: str, *, item: Item | None = None) -> str:
    """The cleaned answer to ``question``; InvalidLabel names the question and the valid answers.

    Choice and toggle questions take one of their choice values; box questions a
    comma-separated list of choice values (one per box, in box order: when ``item`` carries
    ``metadata["boxes"]`` (``prepare_box_check``), exactly one per box); class questions a
    comma-separated list of COCO class names (may be empty), each written in ultralytics'
    spelling (``metrics.coco_names``; an unknown name is refused with close matches).
    """
    value = (value if isinstance(value, str) else "").strip()
    if "\x00" in value:
        raise InvalidLabel(f"The answer to “{question.key}” contains a NUL character.")
    if question.kind == QuestionKind.CLASSES:
        try:
            return ",".join(normalise_class_name(p.strip()) for p in value.split(",") if p.strip())
        except UnknownClassName as exc:
            raise InvalidLabel(f"In the answer to “{question.key}”: {exc}.") from None
    if question.kind == QuestionKind.BOXES:
        parts = [part.strip() for part in value.split(",")] if value else []
        bad = [part for part in parts if question.choice(part) is None]
        if bad:
            raise InvalidLabel(
                f"“{bad[0]}” is not an answer to “{question.key}”. Valid answers per box: "
                f"{', '.join(question.values)}."
            )
        boxes = (item.metadata or {}).get("boxes") if item is not None else None
        if item is not None and isinstance(boxes, list) and len(parts) != len(boxes):
            raise InvalidLabel(
                f"The answer to “{question.key}” has {len(parts)} value(s) for the {len(boxes)} "
                f"box(es) of item {item.key}: answer each box once, in order."
            )
        return ",".join(parts)
    if question.choice(value) is None:
        raise InvalidLabel(
            f"“{value}” is not a label of the question “{question.key}”. "
            f"Valid labels: {', '.join(question.values)}."
        )
    return value


@dataclass(frozen=True)
class _Answer:
    question: Question
    value: str
    reason: str


def _answers_validate(
    item: Item, questions: list[Question], answers: Mapping[str, str], reasons: Mapping[str, str] | None
) -> list[_Answer]:
    """One cleaned answer per question the item asks. A toggle question left out takes its
    default (the screen sends only the ones switched on); any other question left out, or a
    question the item does not ask, is an InvalidLabel naming it."""
    reasons = reasons or {}
    if not isinstance(answers, Mapping) or not answers:
        raise InvalidLabel("No answer given.")
    asked = {question.key: question for question in questions}
    for where, named in (("answers", answers), ("reasons", reasons)):
        unknown = [key for key in named if key not in asked]
        if unknown:
            raise UnknownQuestion(
                f"The item {item.key} does not ask the question “{unknown[0]}”. It asks: {', '.join(asked)}.",
                key=str(unknown[0]),
                where=where,
            )
    cleaned: list[_Answer] = []
    for question in questions:
        raw = answers.get(question.key)
        if raw is None:
            if question.default_value:
                raw = question.default_value
            else:
                raise InvalidLabel(f"No answer to the question “{question.key}” ({question.text}).")
        value = answer_validate(question, raw, item=item)
        cleaned.append(
            _Answer(question, value, _clean_reason(question, value, reasons.get(question.key, "")))
        )
    return cleaned


def _validate_duration(duration_ms: int | None) -> int | None:
    if duration_ms is None:
        return None
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0:
        raise InvalidLabel(
            f"The labelling time must be a whole number of milliseconds ≥ 0, not {duration_ms!r}."
        )
    return min(duration_ms, DURATION_MAX_MS)


def _refuse_if_decided(item: Item, question: Question, final: FinalLabel | None) -> None:
    if final is not None and final.source in DECIDED_SOURCES:
        who = "an import" if final.source == FinalLabelSource.IMPORTED else "a researcher"
        raise AlreadyResolved(
            f"The final answer to “{question.key}” for item {item.key} was already set to "
            f"“{question.display(final.value)}” by {who}; its labels can no longer change."
        )


def _lowest_free_slot(item: Item, n: int, now: datetime) -> int | None:
    """The lowest slot 0..N-1 with no seat, after freeing abandoned seats (reserved, never
    labelled, past their expiry), which return to the pool here.

    The DELETE's WHERE clause is re-checked after any row lock wait on PostgreSQL, so a seat
    whose owner is completing it at this moment is left alone (its slot then stays taken and
    the insert on it fails, which the caller handles).
    """
    seats = list(Assignment.objects.filter(item=item).values_list("slot", "completed_at", "expires_at"))
    abandoned = [
        slot for slot, completed_at, expires_at in seats if completed_at is None and expires_at <= now
    ]
    if abandoned:
        Assignment.objects.filter(item=item, completed_at__isnull=True, expires_at__lte=now).delete()
    taken = {slot for slot, _, _ in seats} - set(abandoned)
    return next((slot for slot in range(n) if slot not in taken), None)


def _seat_try_claim(
    *,
    item: Item,
    annotator: User,
    n: int,
    now: datetime,
    expires_at: datetime,
    completed: bool,
) -> Assignment | None:
    """Insert a seat on the lowest free slot, each attempt inside a savepoint; None when the
    item has no free slot left (or the annotator already holds one on it).

    Losing a slot to a concurrent claim (IntegrityError) re-reads the taken slots and tries
    the next one: giving up on the first conflict would leave items short of N annotators.
    """
    for _attempt in range(n):
        slot = _lowest_free_slot(item, n, now)
        if slot is None:
            return None
        try:
            with transaction.atomic():
                return Assignment.objects.create(
                    item=item,
                    annotator=annotator,
                    slot=slot,
                    claimed_at=now,
                    expires_at=expires_at,
                    completed_at=now if completed else None,
                )
        except IntegrityError:
            if Assignment.objects.filter(item=item, annotator=annotator).exists():
                return None
    return None


def _seat_complete(seat: Assignment, now: datetime) -> None:
    """Mark the seat labelled and recount the item's completed seats (under the item lock,
    so concurrent labels on the same item count each other)."""
    if seat.completed_at is None:
        seat.completed_at = now
        seat.save(update_fields=["completed_at"])
    completed = (
        Assignment.objects.filter(item=OuterRef("pk"), completed_at__isnull=False)
        .order_by()
        .values("item")
        .annotate(n=Count("pk"))
        .values("n")
    )
    Item.objects.filter(pk=seat.item_id).update(completed_seats=Subquery(completed))


_LABEL_FIELDS = (
    "item",
    "question",
    "annotator",
    "value",
    "reason",
    "duration_ms",
    "request_id",
    "created_at",
    "updated_at",
)
_LABEL_REVISION_FIELDS = ("label", "value", "reason", "changed_by", "changed_at", "request_id")


def _labels_write(
    *,
    item: Item,
    annotator: User,
    answers: list[_Answer],
    existing: Mapping[int, Label],
    duration_ms: int | None,
    request_id: str,
    now: datetime,
) -> list[Label]:
    """Create or change the annotator's label on each answered question (only those whose
    answer changed) and append one revision per change. The caller holds the item lock.

    New labels go in with one INSERT and their revisions with another — on PostgreSQL both in
    one statement (a data-modifying WITH), the key press's usual write."""
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
        sql, params = rows.insert(Label, _LABEL_FIELDS, created)
        with connection.cursor() as cursor:
            cursor.execute(sql + " RETURNING id", params)
            # Rows come back in VALUES order (Django's bulk_create relies on the same).
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
        sql, params = rows.insert(LabelRevision, _LABEL_REVISION_FIELDS, revisions)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return result


def _labels_insert_with_revisions(
    labels: list[Label], *, annotator: User, request_id: str, now: datetime
) -> None:
    """PostgreSQL: insert new labels and their first revisions in one statement."""
    sql, params = rows.insert(Label, _LABEL_FIELDS, labels)
    revision = LabelRevision._meta
    statement = (
        f"WITH l AS ({sql} RETURNING id, question_id, value, reason), "
        f"r AS (INSERT INTO {revision.db_table} (label_id, value, reason, changed_by_id, changed_at, request_id) "
        "SELECT id, value, reason, %s, %s, %s FROM l) "
        "SELECT question_id, id FROM l"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*params, annotator.pk, now, request_id])
        ids = dict(cursor.fetchall())
    for label in labels:
        label.pk = ids[label.question_id]


def _is_repeat(existing: Mapping[int, Label], answers: list[_Answer], request_id: str) -> bool:
    """A double key press or a retried POST, which stores nothing: every answer equal to the
    stored one; or the request id of an earlier submit or change carrying the answers that
    request stored (a retry that arrives after a later correction must not undo that
    correction).

    The same request id with other answers is no repeat: it is a page the browser's Back button
    brought back, posting its form again with a new answer. The caller refuses it ("already
    labelled — reload"), instead of answering as if it had been stored."""
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


def _final_revision_append(final: FinalLabel) -> None:
    FinalLabelRevision.objects.create(
        item_id=final.item_id,
        question_id=final.question_id,
        value=final.value,
        source=final.source,
        decided_by=final.decided_by,
        note=final.note,
        decided_at=final.decided_at,
    )


_FINAL_FIELDS = ("item", "question", "value", "source", "decided_by", "note", "decided_at")


def _final_label_insert(final: FinalLabel) -> None:
    """Insert a new agreed final label and its first revision: two plain INSERTs, or one
    statement on PostgreSQL (a data-modifying WITH). Runs on every key press that completes an
    agreement, so no ORM: its INSERTs cost more CPU to build than to run."""
    sql, params = rows.insert(FinalLabel, _FINAL_FIELDS, [final])
    with connection.cursor() as cursor:
        if rows.is_postgresql():
            columns = "item_id, question_id, value, source, decided_by_id, note, decided_at"  # _FINAL_FIELDS
            table = FinalLabelRevision._meta.db_table
            cursor.execute(
                f"WITH f AS ({sql} RETURNING {columns}) INSERT INTO {table} ({columns}) SELECT {columns} FROM f",
                params,
            )
        else:
            cursor.execute(sql, params)
            revision_sql, revision_params = rows.insert(FinalLabelRevision, _FINAL_FIELDS, [final])
            cursor.execute(revision_sql, revision_params)


def _final_label_sync(
    *,
    item: Item,
    study: Study,
    question: Question,
    final: FinalLabel | None,
    values: list[str],
    changed_by: User,
    now: datetime,
) -> None:
    """Derive the agreed final answer of (item, question) from its label values, read under
    the item lock: when the study's agreement rule settles them, an agreed final label;
    otherwise an existing agreed final label is removed (a revision with an empty value keeps
    the history). Final labels set by a researcher or an import are never touched here."""
    if final is not None and final.source != FinalLabelSource.AGREED:
        return
    value = agreed_answer(values, needed=study.labels_per_item, rule=study.agreement)
    if value is not None:
        if final is not None and final.value == value:
            return
        n_same = values.count(value)
        fields = {
            "value": value,
            "source": FinalLabelSource.AGREED,
            "decided_by": None,
            "note": (
                f"All {len(values)} annotators chose “{value}”."
                if n_same == len(values)
                else f"{n_same} of {len(values)} annotators chose “{value}”."
            ),
            "decided_at": now,
        }
        if final is None:
            _final_label_insert(FinalLabel(item=item, question=question, **fields))
            return
        for name, field_value in fields.items():
            setattr(final, name, field_value)
        final.save(update_fields=list(fields))
        _final_revision_append(final)
    elif final is not None:
        final.delete()
        # The removal's source is that of the label removed (only agreed ones are ever removed
        # here): one of the sources the API's schema lists, never "" outside its enum.
        FinalLabelRevision.objects.create(
            item=item,
            question=question,
            value="",
            source=FinalLabelSource.AGREED,
            decided_by=None,
            note=f"Agreement broken: {changed_by.get_username()} changed their label.",
            decided_at=now,
        )


def _final_label_write(
    *,
    item: Item,
    question: Question,
    value: str,
    source: str,
    decided_by: User | None,
    note: str,
    now: datetime,
) -> FinalLabel:
    """Set the final label and append a revision; an identical decision is stored once. The
    caller holds the item lock."""
    note = (note or "").strip()
    final = FinalLabel.objects.filter(item=item, question=question).first()
    if final is not None and (final.value, final.source, final.decided_by_id, final.note) == (
        value,
        source,
        getattr(decided_by, "pk", None),
        note,
    ):
        return final
    final, _ = FinalLabel.objects.update_or_create(
        item=item,
        question=question,
        defaults={
            "value": value,
            "source": source,
            "decided_by": decided_by,
            "note": note,
            "decided_at": now,
        },
    )
    _final_revision_append(final)
    return final


# The items of one queue level an annotator could be given now, as one fixed statement, after a
# cursor and with a limit. An item is claimable when it is queued (Item.queue, level 2 = a
# sampling round's items, handed out before level 1), when the annotator never held a seat on it, it has fewer than N
# live seats (labelled, or reserved and unexpired) and no researcher or import fixed a final
# label of it. Raw SQL because it runs on every key press: the ORM spent ~2 ms of CPU building
# and compiling it, the database well under 1 ms running it. This statement is the claim rule;
# annotator_progress counts by the same rule (tests/annotate/test_selectors.py holds them in step).
_CANDIDATES_SQL = """
SELECT i.id FROM {item} i
WHERE i.study_id = %(study)s AND i.queue = %(queue)s AND i.completed_seats < %(n)s AND i.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM {assignment} a WHERE a.item_id = i.id AND a.annotator_id = %(user)s)
  AND NOT EXISTS (SELECT 1 FROM {final} f
                   WHERE f.item_id = i.id AND f.source IN (%(resolved)s, %(imported)s))
  AND (SELECT COUNT(*) FROM {assignment} a
        WHERE a.item_id = i.id AND (a.completed_at IS NOT NULL OR a.expires_at > %(now)s)) < %(n)s
ORDER BY i.id
LIMIT {limit}{lock}
"""


def _claimable_ids(
    *,
    study: Study,
    annotator: User,
    now: datetime,
    after_id: int,
    limit: int,
    skip_locked: bool,
    queue: int = 1,
) -> list[int]:
    features = connection.features
    lock = ""
    if skip_locked and features.has_select_for_update_skip_locked and features.has_select_for_no_key_update:
        lock = " FOR NO KEY UPDATE OF i SKIP LOCKED"
    sql = _CANDIDATES_SQL.format(
        item=Item._meta.db_table,
        assignment=Assignment._meta.db_table,
        final=FinalLabel._meta.db_table,
        lock=lock,
        limit="%(limit)s",
    )
    params: dict[str, int | str | None] = {
        "study": study.pk,
        "queue": queue,
        "n": study.labels_per_item,
        "after": after_id,
        "user": annotator.pk,
        "resolved": str(FinalLabelSource.RESOLVED),
        "imported": str(FinalLabelSource.IMPORTED),
        "now": connection.ops.adapt_datetimefield_value(now),
        "limit": limit,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _claim_candidates(
    *,
    study: Study,
    annotator: User,
    now: datetime,
    need: int,
    after_id: int,
    queue: int = 1,
    probed_empty: bool = False,
) -> list[Item]:
    """The next items after ``after_id``, by id, the annotator may try to claim a seat on
    (only their ids are loaded).

    On PostgreSQL, first the items nobody else is claiming or labelling at this moment
    (row locks, SKIP LOCKED): 20 annotators asking at once spread over the next items instead
    of queueing behind each other on the same one. Only if that finds too few, the locked ones
    too (the claim then waits for the other transaction and takes the slot left over): an
    annotator must never be told "no work left" just because someone else was busy with the
    last items. On SQLite there is no lock clause; its writes are serial anyway.
    """
    query = functools.partial(
        _claimable_ids, study=study, annotator=annotator, now=now, after_id=after_id, queue=queue
    )
    # ``probed_empty``: the key press's probe just ran this SKIP LOCKED pass and found nothing.
    unlocked = [] if probed_empty else query(limit=need, skip_locked=True)
    ids = unlocked
    if len(unlocked) < need:
        spare = need - len(unlocked) + CLAIM_SPARE_CANDIDATES
        everything = query(limit=len(unlocked) + spare, skip_locked=False)
        busy = [pk for pk in everything if pk not in unlocked][:spare]
        ids = sorted([*unlocked, *busy])
    return [Item(pk=pk) for pk in ids]


# --- labelling -----------------------------------------------------------------------------

_SEAT_RELATED = ("item", "item__prompt")

# The annotator's open seats in the study, in the order they are shown, each with its item, the
# item's prompt and its images with their files — one row per (seat, image). One statement
# instead of a seat query and an image prefetch, and no ORM: it runs on every key press.
_OPEN_SEATS_SQL = """
SELECT {seat}, {item}, {prompt}, {link}, {image}
FROM {assignment} a
JOIN {item_table} i ON i.id = a.item_id
LEFT JOIN {prompt_table} p ON p.id = i.prompt_id
LEFT JOIN {link_table} ii ON ii.item_id = i.id
LEFT JOIN {image_table} im ON im.id = ii.image_id
WHERE a.annotator_id = %(user)s AND i.study_id = %(study)s AND a.completed_at IS NULL
  AND NOT EXISTS ({decided})
ORDER BY a.claimed_at, i.queue DESC, a.item_id, ii.role, ii.id
"""


def _open_seats(*, study: Study, annotator: User, now: datetime) -> list[Assignment]:
    """The annotator's open seats with their items, prompts and images, in the order they are
    shown: by claim time, a sampling round's items (queue 2) first among seats claimed
    together, then by item.

    Sliding expiry: an annotator who keeps asking for work keeps the seats already handed to
    them (the preloaded items too); an expired seat nobody took is simply theirs again. Only
    seats past half their time are renewed, so most calls write nothing here.
    """
    sql = rows.statement(
        "open-seats",
        lambda: _OPEN_SEATS_SQL.format(
            seat=rows.columns(Assignment, "a"),
            item=rows.columns(Item, "i"),
            prompt=rows.columns(Prompt, "p"),
            link=rows.columns(ItemImage, "ii"),
            image=rows.columns(Image, "im"),
            assignment=Assignment._meta.db_table,
            item_table=Item._meta.db_table,
            prompt_table=Prompt._meta.db_table,
            link_table=ItemImage._meta.db_table,
            image_table=Image._meta.db_table,
            decided=_DECIDED_SEAT_SQL.format(final=FinalLabel._meta.db_table),
        ),
    )
    params: dict[str, int | str] = {
        "user": annotator.pk,
        "study": study.pk,
        "resolved": str(FinalLabelSource.RESOLVED),
        "imported": str(FinalLabelSource.IMPORTED),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    at_item = rows.width(Assignment)
    at_prompt = at_item + rows.width(Item)
    at_link = at_prompt + rows.width(Prompt)
    at_image = at_link + rows.width(ItemImage)
    seats: dict[int, Assignment] = {}
    links: dict[int, list[ItemImage]] = {}
    for row in found:
        seat = seats.get(row[0])
        if seat is None:
            seat = seats[row[0]] = rows.from_row(Assignment, row)
            item = rows.from_row(Item, row, at_item)
            item.prompt = rows.from_row(Prompt, row, at_prompt) if row[at_prompt] is not None else None
            item.study = study
            seat.item = item
            links[seat.pk] = []
        if row[at_link] is not None:
            link = rows.from_row(ItemImage, row, at_link)
            link.image = rows.from_row(Image, row, at_image)
            links[seat.pk].append(link)
    for seat in seats.values():
        # What ``prefetch_related("item_images")`` leaves behind: item.item_images.all() is this list.
        cached = ItemImage.objects.none()
        cached._result_cache = links[seat.pk]
        cached._prefetch_done = True  # type: ignore[attr-defined]
        seat.item._prefetched_objects_cache = {"item_images": cached}  # type: ignore[attr-defined]
    renew_before = now + timedelta(seconds=study.claim_timeout_seconds / 2)
    stale = [seat for seat in seats.values() if seat.expires_at < renew_before]
    if stale:
        expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
        Assignment.objects.filter(pk__in=[seat.pk for seat in stale]).update(expires_at=expires_at)
        for seat in stale:
            seat.expires_at = expires_at
    return list(seats.values())


_DECIDED_SEAT_SQL = (
    "SELECT 1 FROM {final} f WHERE f.item_id = a.item_id AND f.source IN (%(resolved)s, %(imported)s)"
)


SeatRow = tuple[int, datetime | None, datetime]  # slot, completed_at, expires_at


def _seat_rows(items: list[Item]) -> dict[int, list[SeatRow]]:
    """The seats of each candidate item, in one read."""
    seats: dict[int, list[SeatRow]] = {item.pk: [] for item in items}
    rows = Assignment.objects.filter(item_id__in=list(seats)).values_list(
        "item_id", "slot", "completed_at", "expires_at"
    )
    for item_id, slot, completed_at, expires_at in rows:
        seats[item_id].append((slot, completed_at, expires_at))
    return seats


def _seat_claim_fast(
    *,
    item: Item,
    seats: list[SeatRow],
    annotator: User,
    n: int,
    now: datetime,
    expires_at: datetime,
) -> bool:
    """Claim a seat on ``item`` given its seats as read a moment ago; False when the item has
    no free slot.

    Abandoned seats (reserved, never labelled, past their expiry) are deleted first: they
    return to the pool here. Then one INSERT … ON CONFLICT DO NOTHING on the lowest free slot
    (no savepoint). Only when a concurrent claim took that slot in between (the caller finds
    no seat of the annotator on the item) does it fall back to ``_seat_try_claim``, which
    re-reads the slots and tries the next ones — so contended last seats are still all handed out.
    """
    abandoned = {slot for slot, done, expires in seats if done is None and expires <= now}
    if abandoned:
        Assignment.objects.filter(item=item, completed_at__isnull=True, expires_at__lte=now).delete()
    taken = {slot for slot, _, _ in seats} - abandoned
    slot = next((slot for slot in range(n) if slot not in taken), None)
    if slot is None:
        return False
    Assignment.objects.bulk_create(
        [Assignment(item=item, annotator=annotator, slot=slot, claimed_at=now, expires_at=expires_at)],
        ignore_conflicts=True,
    )
    return True


def _seats_claim(
    *,
    study: Study,
    annotator: User,
    need: int,
    now: datetime,
    after: tuple[int, int] | None = None,
    probed_empty: int | None = None,
) -> list[Assignment]:
    """Claim seats on up to ``need`` more items, with their items and prompts loaded.

    Claims go in strictly ascending item id within the transaction (a cursor, never back),
    abandoned-seat deletes included: two claimers then never wait for each other's rows in a
    cycle, so no deadlock. Each round inserts optimistically, then reads back the seats it got
    (with their items) in one query; an insert lost to a concurrent claim falls back to
    ``_seat_try_claim`` (the item's other slots), and when that fails too the next round looks
    further on — an annotator is never left short while claimable seats remain.
    """
    n = study.labels_per_item
    expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
    won: list[Assignment] = []
    # A sampling round's items first (queue 2), then the others (queue 1): ascending (level, id),
    # one order for every claimer, so still no deadlock. Studies without a round pay nothing.
    for queue in (2, 1) if study.priority_queue else (1,):
        # ``after``: (level, id) the caller's claims already reached; claims only go on past it.
        if after is not None and queue > after[0]:
            continue
        after_id = after[1] if after is not None and queue == after[0] else 0
        while len(won) < need:
            candidates = _claim_candidates(
                study=study,
                annotator=annotator,
                now=now,
                need=need - len(won),
                after_id=after_id,
                queue=queue,
                probed_empty=queue == probed_empty and after_id == 0,
            )
            if not candidates:
                break
            seats = _seat_rows(candidates)
            attempted: list[int] = []
            for item in candidates:
                after_id = item.pk
                if _seat_claim_fast(
                    item=item, seats=seats[item.pk], annotator=annotator, n=n, now=now, expires_at=expires_at
                ):
                    attempted.append(item.pk)
                    if len(won) + len(attempted) >= need:
                        break
            if not attempted:
                continue
            mine = {
                seat.item_id: seat
                for seat in Assignment.objects.filter(
                    item_id__in=attempted, annotator=annotator
                ).select_related(*_SEAT_RELATED)
            }
            for item_id in attempted:
                seat = mine.get(item_id)
                if seat is None and _seat_try_claim(
                    item=Item(pk=item_id),
                    annotator=annotator,
                    n=n,
                    now=now,
                    expires_at=expires_at,
                    completed=False,
                ):
                    seat = Assignment.objects.select_related(*_SEAT_RELATED).get(
                        item_id=item_id, annotator=annotator
                    )
                if seat is not None:
                    won.append(seat)
    return won


# The key press's claim probe, one statement: the annotator's progress counts (the statement of
# annotate.selectors.annotator_progress, as a one-row table), the first claimable items of one
# queue level — as many as the annotator's open seats fall short of the queue's size, skipping
# items other claimers hold on PostgreSQL — and the seats those items have now.
_QUEUE_PROBE_SQL = """
SELECT p.done, p.open_seats, p.unfinished, p.mine, p.held, c.id, s.slot, s.completed_at, s.expires_at
FROM ({progress}) p
LEFT JOIN ({candidates}) c ON 1 = 1
LEFT JOIN {assignment} s ON s.item_id = c.id
ORDER BY c.id, s.slot
"""
# How many seats the annotator's queue lacks: ``size`` less their open seats (as _open_seats
# counts them), never below 0. The probe's LIMIT, so that it locks no more items than it needs.
_SHORTFALL_SQL = """(SELECT CASE WHEN COUNT(*) < %(size)s THEN %(size)s - COUNT(*) ELSE 0 END
  FROM {assignment} a JOIN {item} i ON i.id = a.item_id
  WHERE a.annotator_id = %(user)s AND i.study_id = %(study)s AND a.completed_at IS NULL
    AND NOT EXISTS ({decided}))"""


def _skips_locked_rows() -> bool:
    features = connection.features
    return features.has_select_for_update_skip_locked and features.has_select_for_no_key_update


def _queue_probe(
    *, study: Study, annotator: User, size: int, now: datetime, queue: int
) -> tuple[Progress, int, dict[int, list[SeatRow]]]:
    """(progress, the annotator's open seats, the first claimable items of ``queue`` by id
    with their seats) — see _QUEUE_PROBE_SQL."""
    tables = {
        "item": Item._meta.db_table,
        "assignment": Assignment._meta.db_table,
        "final": FinalLabel._meta.db_table,
    }
    progress_sql, params = progress_statement(study=study, annotator=annotator, now=now)

    def build() -> str:
        lock = " FOR NO KEY UPDATE OF i SKIP LOCKED" if _skips_locked_rows() else ""
        candidates = _CANDIDATES_SQL.format(
            lock=lock,
            limit=_SHORTFALL_SQL.format(decided=_DECIDED_SEAT_SQL.format(**tables), **tables),
            **tables,
        )
        return _QUEUE_PROBE_SQL.format(progress=progress_sql, candidates=candidates, **tables)

    sql = rows.statement("queue-probe", build)
    params |= {"queue": queue, "after": 0, "size": size}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    seats: dict[int, list[SeatRow]] = {}
    for row in found:
        if row[5] is None:
            continue
        item_seats = seats.setdefault(row[5], [])
        if row[6] is not None:
            completed_at, expires_at = rows.convert(Assignment, ("completed_at", "expires_at"), row[7:9])
            item_seats.append((row[6], completed_at, expires_at))
    return progress_from_counts(found[0]), found[0][1], seats


def _seats_claim_probed(
    *,
    study: Study,
    annotator: User,
    candidates: dict[int, list[SeatRow]],
    need: int,
    now: datetime,
) -> int:
    """Claim seats on up to ``need`` of the probed ``candidates`` (ascending id): abandoned
    seats are freed first, then one INSERT … ON CONFLICT DO NOTHING RETURNING for all the
    chosen slots. A slot lost to a concurrent claim falls back to ``_seat_try_claim`` (the
    item's other slots). Returns how many seats were won."""
    n = study.labels_per_item
    expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
    chosen: list[Assignment] = []
    abandoned_on: set[int] = set()
    for item_id, seats in candidates.items():
        abandoned = {slot for slot, done, expires in seats if done is None and expires <= now}
        if abandoned:
            abandoned_on.add(item_id)
        taken = {slot for slot, _, _ in seats} - abandoned
        slot = next((slot for slot in range(n) if slot not in taken), None)
        if slot is None:
            continue
        chosen.append(
            Assignment(item_id=item_id, annotator=annotator, slot=slot, claimed_at=now, expires_at=expires_at)
        )
        if len(chosen) >= need:
            break
    if not chosen:
        return 0
    fields = ("item", "annotator", "slot", "claimed_at", "expires_at")
    # One INSERT for all the seats; with abandoned seats to free, item by item instead (free,
    # then claim): every row this transaction writes or waits for stays in ascending item order.
    batches = [[seat] for seat in chosen] if abandoned_on else [chosen]
    won: set[int] = set()
    with connection.cursor() as cursor:
        for batch in batches:
            if batch[0].item_id in abandoned_on:
                Assignment.objects.filter(
                    item_id=batch[0].item_id, completed_at__isnull=True, expires_at__lte=now
                ).delete()
            sql, params = rows.insert(Assignment, fields, batch)
            cursor.execute(sql + " ON CONFLICT DO NOTHING RETURNING item_id", params)
            won |= {item_id for (item_id,) in cursor.fetchall()}
    for seat in chosen:
        if seat.item_id not in won and _seat_try_claim(
            item=Item(pk=seat.item_id),
            annotator=annotator,
            n=n,
            now=now,
            expires_at=expires_at,
            completed=False,
        ):
            won.add(seat.item_id)
    return len(won)


def _queue(*, study: Study, annotator: User, size: int, now: datetime) -> tuple[list[Assignment], Progress]:
    """assignment_queue without the membership check (the caller made it), and the
    annotator's progress. The usual cost is three statements: the probe (progress, open seats,
    candidates and their seats), the seat INSERT, the open seats with their items and images.
    A probe that finds too few items (other claimers hold them, or a round's level ran dry)
    hands over to ``_seats_claim``, which searches every level and takes held items too."""
    first_level = 2 if study.priority_queue else 1
    progress, open_count, candidates = _queue_probe(
        study=study, annotator=annotator, size=size, now=now, queue=first_level
    )
    need = size - open_count
    if need > 0:
        short = len(candidates) < need
        if short and _skips_locked_rows():
            # PostgreSQL: the probe skipped items that other claimers hold (or the level ran dry).
            # The full search takes those too, in one ascending order with the ones the probe
            # found — claiming these first and going back for lower ids later could deadlock.
            _seats_claim(
                study=study,
                annotator=annotator,
                need=need,
                now=now,
                # A probe that found nothing unlocked need not be run again (the end of a study).
                probed_empty=first_level if not candidates else None,
            )
        else:
            won = _seats_claim_probed(
                study=study, annotator=annotator, candidates=candidates, need=need, now=now
            )
            # Short without row locks (SQLite, whose writers take turns): the probe saw every
            # claimable item of its level, so only the other level of a round is left to search.
            # Not short: seats lost to concurrent claims; the search goes on past the probe's items.
            if won < need and (not short or first_level == 2):
                after = None if short else (first_level, max(candidates))
                _seats_claim(study=study, annotator=annotator, need=need - won, now=now, after=after)
    return _open_seats(study=study, annotator=annotator, now=now), progress


@transaction.atomic
def assignment_queue(
    *, study: Study, annotator: User, size: int = 2, now: datetime | None = None
) -> list[Assignment]:
    """The annotator's open seats (not labelled yet), topped up to ``size`` by claiming seats on
    the next items, by id, that have a free seat and that the annotator does not hold.

    The first seat is the item to show; the others are preloaded by the browser. Each seat's
    item comes with its prompt and images. The annotator's own expired seats are renewed
    (nobody took them, so they are still theirs); other annotators' expired seats are freed
    when their item is claimed. [] when the annotator has no work left. Raises NotAssigned if
    the user is not an annotator of the study.
    """
    _require_member(study, annotator)
    return _queue(study=study, annotator=annotator, size=size, now=now or timezone.now())[0]


def _submit(
    *,
    item: WithAnnotations[Item, _Membership],
    annotator: User,
    answers: Mapping[str, str],
    reasons: Mapping[str, str] | None,
    duration_ms: int | None,
    request_id: str,
    change: bool,
    seen_revision: int | None,
    now: datetime,
) -> list[Label]:
    """annotation_submit on an item locked by ``_lock_item_for_label``.

    Few statements, because it runs on every key press. The common case — the annotator's
    open seat, answered for the first time — costs three after the lock: one UPDATE completes
    the seat and, in its RETURNING clause, reads the item's labels and counts its final labels
    (after the lock, so nothing another writer committed is missed; its row lock also stops a
    claimer from freeing the seat as expired at this moment); one statement writes the labels
    and one their revisions (one in all on PostgreSQL). A final label that the new labels agree
    on adds its row and its revision (one statement on PostgreSQL). Everything else — a
    completed seat (change, double submit, stale form), final labels already there — reads
    what it needs with the ORM, as it always did.
    """
    study = item.study
    if not item.annotator_is_member:
        raise _not_member(study, annotator)
    questions = item_questions(item, study_questions(study))
    cleaned = _answers_validate(item, questions, answers, reasons)
    duration_ms = _validate_duration(duration_ms)
    request_id = (request_id or "")[:64]
    opened, seen, n_finals = _seat_complete_reading(item=item, annotator=annotator, now=now)
    existing: dict[int, Label] = {}
    key_press = opened and all(annotator_id != annotator.pk for _, annotator_id, _ in seen)
    if key_press:
        # The usual key press: an open seat, none of the annotator's labels yet.
        others = [(question_id, value) for question_id, _, value in seen]
    else:
        if not opened:
            _seat_uncount(item)
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
        _refuse_if_decided(item, answer.question, finals.get(answer.question.pk))
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
        _final_label_sync(
            item=item,
            study=study,
            question=answer.question,
            final=finals.get(answer.question.pk),
            values=values,
            changed_by=annotator,
            now=now,
        )
    return written


# Complete the annotator's open seat on the item and, in the same statement, read the item's
# labels (question, annotator, value) and count its final labels. The subqueries of RETURNING
# run after the item lock was granted (the lock was the previous statement), so they see every
# label another writer committed. No row back: the seat was completed before, or is not theirs.
_SEAT_COMPLETE_SQL = """
UPDATE {assignment} SET completed_at = %(now)s
WHERE item_id = %(item)s AND annotator_id = %(user)s AND completed_at IS NULL
RETURNING id,
  (SELECT {labels} FROM {label} l WHERE l.item_id = %(item)s),
  (SELECT COUNT(*) FROM {final} f WHERE f.item_id = %(item)s)
"""


def _seat_complete_reading(
    *, item: Item, annotator: User, now: datetime
) -> tuple[bool, list[tuple[int, int, str]], int]:
    """Complete the annotator's open seat on the locked item: (whether a seat was opened —
    then also the item's labels as (question_id, annotator_id, value) and how many final
    labels it has; otherwise [] and 0)."""
    sql = rows.statement(
        "seat-complete",
        lambda: _SEAT_COMPLETE_SQL.format(
            assignment=Assignment._meta.db_table,
            label=Label._meta.db_table,
            final=FinalLabel._meta.db_table,
            labels=rows.json_array_agg(rows.json_array("l.question_id", "l.annotator_id", "l.value")),
        ),
    )
    params = {"now": connection.ops.adapt_datetimefield_value(now), "item": item.pk, "user": annotator.pk}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return False, [], 0
    return True, [(q, a, v) for q, a, v in rows.json_value(row[1])], row[2]


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
    """Save the annotator's answers to every question the item asks and update the item's
    final labels, one per question.

    ``answers`` maps question keys to values; toggle questions left out take their default.
    Needs the annotator's seat on the item: open, or — with ``change=True`` (undo / go back) —
    completed; ``seen_revision`` (``label_revision_stamp`` when the change form was drawn)
    refuses a change from a stale form. A repeat with the same request_id, or with the same
    answers and reasons, stores nothing new. Each changed answer appends a LabelRevision.
    Then per question: the study's agreement rule settled → agreed final label; otherwise an
    agreed final label is removed (history kept).

    Raises NotAssigned (not an annotator of the study, or no seat on the item — e.g. the
    reservation expired and went to someone else), InvalidLabel (an answer not among the
    question's choices, a question the item does not ask, a missing reason, a bad duration),
    StaleSubmit (the item was labelled already and this is not an explicit change, or the
    labels changed since the form was drawn), AlreadyResolved (a researcher or an import
    already fixed a final label).
    """
    locked = _lock_item_for_label(item_id=item.pk, annotator=annotator)
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
    """``annotation_submit`` on item ``item_id`` of ``study``, then ``assignment_queue``, in
    one transaction — the labeling screen's key press. One membership check (read with the
    item lock) and one commit instead of two of each.

    Same errors as annotation_submit (nothing is stored when one is raised), plus
    Item.DoesNotExist when the item is not in the study.
    """
    item = _lock_item_for_label(item_id=item_id, annotator=annotator, study=study)
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
    queue, progress = _queue(study=study, annotator=annotator, size=size, now=now)
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
    """Change one label the annotator gave (the API's PUT and PATCH): its answer to ``value``
    and its reason to ``reason``; None keeps the stored one. A reason stays only with an answer
    that asks for one. The annotator's other answers on the item are neither read nor written:
    two changes to different questions of one item at the same moment both last.

    The label is read after the item lock (the lock every label writer takes), so a change
    that waited for another one builds on it; an unchanged answer writes nothing. Then the
    question's agreed final label follows the labels, as for a submit. Raises NotAssigned
    (not the label's annotator, or no longer an annotator of the study), InvalidLabel,
    AlreadyResolved.
    """
    item = _lock_item(Item(pk=label.item_id))
    now = timezone.now()  # after the lock (see annotation_submit_next)
    current = Label.objects.select_related("question").get(pk=label.pk)
    if current.annotator_id != annotator.pk:
        raise NotAssigned("Only the annotator who gave a label may change it.")
    _require_member(item.study, annotator)
    question = current.question
    new_value = answer_validate(question, current.value if value is None else value, item=item)
    new_reason = _clean_reason(question, new_value, current.reason if reason is None else reason)
    if (new_value, new_reason) == (current.value, current.reason):
        return current
    final = FinalLabel.objects.filter(item=item, question=question).first()
    _refuse_if_decided(item, question, final)
    [written] = _labels_write(
        item=item,
        annotator=annotator,
        answers=[_Answer(question, new_value, new_reason)],
        existing={question.pk: current},
        duration_ms=None,
        request_id=(request_id or "")[:64],
        now=now,
    )
    others = Label.objects.filter(item=item, question=question).exclude(annotator=annotator)
    _final_label_sync(
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
    """The item the annotator labelled just before ``before`` (their latest labelled item when
    ``before`` is None or not labelled by them yet) — the "Z: go back one" key; call it again
    with the returned item to go further back.

    Items whose final labels a researcher or an import fixed are skipped: their labels can no
    longer change. Raises NotAssigned (not in the study), NothingToUndo.
    """
    _require_member(study, annotator)
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
    """Store one answer from an import file: the annotator joins the study and gets a completed
    seat on the item, then the answer is validated, written and the question's final label
    synced as for a submit. Importing the same label again changes nothing.

    Raises ItemFull (N other annotators already hold the item's seats), InvalidLabel (also for
    a question the item does not ask), AlreadyResolved.
    """
    item = _lock_item(item)
    now = timezone.now()  # after the lock (see annotation_submit_next)
    study = item.study
    if question.study_id != study.pk or question not in item_questions(item, study_questions(study)):
        raise InvalidLabel(f"The item {item.key} does not ask the question “{question.key}”.")
    value = answer_validate(question, value, item=item)
    reason = _clean_reason(question, value, reason)
    labels = list(Label.objects.filter(item=item, question=question))
    existing = next((label for label in labels if label.annotator_id == annotator.pk), None)
    if existing is not None and (existing.value, existing.reason) == (value, reason):
        return existing
    final = FinalLabel.objects.filter(item=item, question=question).first()
    _refuse_if_decided(item, question, final)
    study.annotators.add(annotator)
    seat = Assignment.objects.filter(item=item, annotator=annotator).first()
    if seat is None:
        seat = _seat_try_claim(
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
    _seat_complete(seat, now)
    answer = _Answer(question, value, reason)
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
    _final_label_sync(
        item=item, study=study, question=question, final=final, values=values, changed_by=annotator, now=now
    )
    return label


# --- final labels --------------------------------------------------------------------------


def _question_in(item: Item, question: Question) -> None:
    if question.study_id != item.study_id:
        raise InvalidLabel(
            f"The question “{question.key}” is not a question of the study of item {item.key}."
        )


@transaction.atomic
def dispute_resolve(
    *, item: Item, question: Question, researcher: User, value: str, note: str = ""
) -> FinalLabel:
    """A researcher sets the final answer of a disputed (item, question) (N labels that do not
    settle it), or changes the decision on an already resolved one. Source "resolved", who and
    when recorded, every decision kept in FinalLabelRevision. Raises InvalidLabel, NotDisputed."""
    item = _lock_item(item)
    _question_in(item, question)
    value = answer_validate(question, value, item=item)
    state = item_question_states(item).get(question.key)
    if state not in (ItemState.DISPUTED, ItemState.RESOLVED):
        shown = (state or "not asked").replace("_", " ")
        raise NotDisputed(
            f"Item {item.key} is {shown} on “{question.key}”, not disputed: only answers whose "
            "labels do not settle them (or already resolved ones) can be resolved."
        )
    return _final_label_write(
        item=item,
        question=question,
        value=value,
        source=FinalLabelSource.RESOLVED,
        decided_by=researcher,
        note=note,
        now=timezone.now(),
    )


def dispute_resolve_unresolvable(
    *, item: Item, question: Question, researcher: User, note: str = ""
) -> FinalLabel:
    """The paper's rule for disputes the annotators cannot settle: the question's
    ``unresolvable_value`` (gender: low quality) becomes the final answer. Same errors as
    dispute_resolve, plus InvalidLabel when the question has no such value."""
    if not question.unresolvable_value:
        raise InvalidLabel(f"The question “{question.key}” has no answer for disputes nobody can settle.")
    return dispute_resolve(
        item=item,
        question=question,
        researcher=researcher,
        value=question.unresolvable_value,
        note=note or "Annotators could not agree.",
    )


@transaction.atomic
def final_label_set(
    *,
    item: Item,
    question: Question,
    value: str,
    decided_by: User | None,
    note: str = "",
    source: str = FinalLabelSource.IMPORTED,
) -> FinalLabel:
    """Set an (item, question)'s final answer directly (ground-truth import, admin), whatever
    its labels say; history kept, an identical decision stored once. Raises InvalidLabel."""
    item = _lock_item(item)
    _question_in(item, question)
    value = answer_validate(question, value, item=item)
    if source not in FinalLabelSource.values:
        raise InvalidLabel(f"“{source}” is not a final label source ({', '.join(FinalLabelSource.values)}).")
    return _final_label_write(
        item=item,
        question=question,
        value=value,
        source=source,
        decided_by=decided_by,
        note=note,
        now=timezone.now(),
    )
