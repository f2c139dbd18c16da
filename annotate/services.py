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

Cost: the labeling screen's key press (``annotation_submit_next``) is one transaction of
about a dozen statements (tests/annotate/test_views.py pins the count); the two reads that
run on every key press and grow with the study (claim candidates here, the progress counter
in selectors) are fixed SQL strings, because building them through the ORM cost more CPU than
running them. bench/bench_label_submit.py measures it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Prefetch, Subquery, prefetch_related_objects
from django.utils import timezone

from annotate.errors import (
    AlreadyResolved,
    InvalidLabel,
    ItemFull,
    NotAssigned,
    NotDisputed,
    NothingToUndo,
    StaleSubmit,
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
from annotate.selectors import DECIDED_SOURCES, item_question_states
from metrics.coco_names import UnknownClassName, normalise_class_name
from metrics.consensus import agreed_answer
from studies.models import Item, ItemImage, Question, QuestionKind, Study
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


def _lock_item_for_label(
    *, item_id: int, annotator: User, study: Study | None = None
) -> WithAnnotations[Item, _Membership]:
    """``_lock_item`` for a label write, with ``annotator_is_member`` read in the same query:
    the hot path of every key press checks membership without a query of its own. Raises
    Item.DoesNotExist (also when ``study`` is given and the item is not in it)."""
    member = Study.annotators.through.objects.filter(study_id=OuterRef("study_id"), user_id=annotator.pk)
    items = Item.objects.select_for_update(no_key=True, of=("self",))
    # With a study given, the caller's study object serves: no join for it.
    items = items.select_related("study") if study is None else items.filter(study=study)
    item = items.annotate(annotator_is_member=Exists(member)).get(pk=item_id)
    if study is not None:
        item.study = study
    return item


def _clean_reason(question: Question, value: str, reason: str) -> str:
    reason = (reason or "").strip()
    choice = question.choice(value)
    if choice is not None and choice.get("requires_reason") and not reason:
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
    unknown = [key for key in answers if key not in asked]
    if unknown:
        raise InvalidLabel(
            f"The item {item.key} does not ask the question “{unknown[0]}”. It asks: {', '.join(asked)}."
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


def _labels_write(
    *,
    item: Item,
    annotator: User,
    answers: list[_Answer],
    existing: Mapping[int, Label],
    duration_ms: int | None,
    request_id: str,
) -> list[Label]:
    """Create or change the annotator's label on each answered question (only those whose
    answer changed) and append one revision per change. The caller holds the item lock."""
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
        )
        created.append(label)
        result.append(label)
    if created:
        Label.objects.bulk_create(created)
        if any(label.pk is None for label in created):  # backends without RETURNING (none we use)
            ids = dict(Label.objects.filter(item=item, annotator=annotator).values_list("question_id", "pk"))
            for label in created:
                label.pk = ids[label.question_id]
        revisions += [
            LabelRevision(
                label=label,
                value=label.value,
                reason=label.reason,
                changed_by=annotator,
                request_id=request_id,
            )
            for label in created
        ]
    if revisions:
        LabelRevision.objects.bulk_create(revisions)
    return result


def _is_repeat(existing: Mapping[int, Label], answers: list[_Answer], request_id: str) -> bool:
    """A double key press or a retried POST: every answer equal to the stored one, or the
    request id of the current labels or of any earlier change to them (a retry that arrives
    after a later correction must not undo that correction)."""
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
    if any(label.request_id == request_id for label in existing.values()):
        return True
    return LabelRevision.objects.filter(label__in=list(existing.values()), request_id=request_id).exists()


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
            final = FinalLabel.objects.create(item=item, question=question, **fields)
        else:
            for name, field_value in fields.items():
                setattr(final, name, field_value)
            final.save(update_fields=list(fields))
        _final_revision_append(final)
    elif final is not None:
        final.delete()
        FinalLabelRevision.objects.create(
            item=item,
            question=question,
            value="",
            source="",
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
LIMIT %(limit)s{lock}
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
    *, study: Study, annotator: User, now: datetime, need: int, after_id: int, queue: int = 1
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
    unlocked = query(limit=need, skip_locked=True)
    ids = unlocked
    if len(unlocked) < need:
        spare = need - len(unlocked) + CLAIM_SPARE_CANDIDATES
        everything = query(limit=len(unlocked) + spare, skip_locked=False)
        busy = [pk for pk in everything if pk not in unlocked][:spare]
        ids = sorted([*unlocked, *busy])
    return [Item(pk=pk) for pk in ids]


# --- labelling -----------------------------------------------------------------------------

_SEAT_RELATED = ("item", "item__prompt")


def _with_item_images(seats: list[Assignment]) -> list[Assignment]:
    """Load the images of the seats' items, with their files, in one query (the screen shows them)."""
    links = Prefetch("item_images", queryset=ItemImage.objects.select_related("image").order_by("role"))
    prefetch_related_objects([seat.item for seat in seats], links)
    return seats


def _open_seats(*, study: Study, annotator: User, now: datetime) -> list[Assignment]:
    """The annotator's open seats with their items (and prompts), in the order they are shown.

    Sliding expiry: an annotator who keeps asking for work keeps the seats already handed to
    them (the preloaded items too); an expired seat nobody took is simply theirs again. Only
    seats past half their time are renewed, so most calls write nothing here.
    """
    decided = FinalLabel.objects.filter(item=OuterRef("item"), source__in=DECIDED_SOURCES)
    mine_open = Assignment.objects.filter(
        item__study=study, annotator=annotator, completed_at__isnull=True
    ).exclude(Exists(decided))
    seats = list(mine_open.select_related(*_SEAT_RELATED).order_by("claimed_at", "item_id"))
    renew_before = now + timedelta(seconds=study.claim_timeout_seconds / 2)
    if any(seat.expires_at < renew_before for seat in seats):
        expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
        Assignment.objects.filter(pk__in=[s.pk for s in seats if s.expires_at < renew_before]).update(
            expires_at=expires_at
        )
        for seat in seats:
            if seat.expires_at < renew_before:
                seat.expires_at = expires_at
    return seats


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


def _seats_claim(*, study: Study, annotator: User, need: int, now: datetime) -> list[Assignment]:
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
        after_id = 0
        while len(won) < need:
            candidates = _claim_candidates(
                study=study,
                annotator=annotator,
                now=now,
                need=need - len(won),
                after_id=after_id,
                queue=queue,
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


def _queue(*, study: Study, annotator: User, size: int, now: datetime) -> list[Assignment]:
    """assignment_queue without the membership check (the caller made it)."""
    seats = _open_seats(study=study, annotator=annotator, now=now)
    if len(seats) < size:
        seats += _seats_claim(study=study, annotator=annotator, need=size - len(seats), now=now)
    # Stable on claim time: open seats come ordered by item, new ones in claim order (a round first).
    seats = sorted(seats, key=lambda seat: seat.claimed_at)
    for seat in seats:
        seat.item.study = study
    return _with_item_images(seats)


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
    return _queue(study=study, annotator=annotator, size=size, now=now or timezone.now())


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

    Few statements, because it runs on every key press: the seat is completed by one UPDATE
    (its row lock also stops a claimer from freeing it as expired at this moment), the item's
    labels and final labels are read once each — after the lock — and the completed-seat
    counter is bumped rather than recounted: every writer of labels holds the item lock, so the
    increment cannot race.
    """
    study = item.study
    if not item.annotator_is_member:
        raise _not_member(study, annotator)
    questions = item_questions(item, study_questions(study))
    cleaned = _answers_validate(item, questions, answers, reasons)
    duration_ms = _validate_duration(duration_ms)
    request_id = (request_id or "")[:64]
    mine = Assignment.objects.filter(item=item, annotator=annotator)
    opened = mine.filter(completed_at__isnull=True).update(completed_at=now)
    if not opened and not mine.exists():
        raise NotAssigned(
            f"Item {item.key} is not assigned to {annotator.get_username()} "
            "(never handed out to you, or your reservation expired and went back to the pool)."
        )
    if opened:
        Item.objects.filter(pk=item.pk).update(completed_seats=F("completed_seats") + 1)
    labels = list(Label.objects.filter(item=item))
    existing = {label.question_id: label for label in labels if label.annotator_id == annotator.pk}
    if _is_repeat(existing, cleaned, request_id):
        return [existing[a.question.pk] for a in cleaned]  # double submit: already stored
    if not opened:
        # The seat was completed before: only an explicit change (undo / go back) may alter the
        # labels, and only from a form drawn on the labels as they still are.
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
    finals = {final.question_id: final for final in FinalLabel.objects.filter(item=item)}
    for answer in cleaned:
        _refuse_if_decided(item, answer.question, finals.get(answer.question.pk))
    written = _labels_write(
        item=item,
        annotator=annotator,
        answers=cleaned,
        existing=existing,
        duration_ms=duration_ms,
        request_id=request_id,
    )
    for answer in cleaned:
        values = [
            label.value
            for label in labels
            if label.question_id == answer.question.pk and label.annotator_id != annotator.pk
        ] + [answer.value]
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
    return _submit(
        item=_lock_item_for_label(item_id=item.pk, annotator=annotator),
        annotator=annotator,
        answers=answers,
        reasons=reasons,
        duration_ms=duration_ms,
        request_id=request_id,
        change=change,
        seen_revision=seen_revision,
        now=timezone.now(),
    )


@dataclass(frozen=True)
class SubmitNext:
    """What the labeling screen needs after a key press: the labels saved and the queue."""

    labels: list[Label]
    queue: list[Assignment]


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
    now = timezone.now()
    item = _lock_item_for_label(item_id=item_id, annotator=annotator, study=study)
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
    return SubmitNext(labels=labels, queue=_queue(study=study, annotator=annotator, size=size, now=now))


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
    now = timezone.now()
    item = _lock_item(item)
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
