"""Seats and claims: handing items out to annotators. One claim path, ``_seats_take``, fed by the
key press's probe (``_queue_probe``) or the full search (``_seats_search``); every claim goes in
ascending item id (docs/explanation/key-press.md, "Claims under concurrency")."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from annotate import sql as rows
from annotate.models import Assignment, FinalLabelSource
from annotate.selectors import Progress, progress_from_counts, progress_statement
from annotate.services import locks
from annotate.services.gold import gold_seat_claim
from studies.models import Image, Item, ItemImage, Prompt, Study

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Contended candidates fetched beyond what is needed: spares absorb seats that other
# annotators take between our SELECT and our INSERT.
CLAIM_SPARE_CANDIDATES = 2

SeatRow = tuple[int, datetime | None, datetime]  # slot, completed_at, expires_at


# --- one seat ----------------------------------------------------------------------------------


def free_slot(seats: list[SeatRow], n: int, now: datetime) -> tuple[int | None, bool]:
    """(The lowest slot 0..N-1 free once abandoned seats are freed — None when there is none,
    whether any seat is abandoned: reserved, never labelled, past its expiry). The one slot rule
    of every claim."""
    abandoned = {slot for slot, done, expires in seats if done is None and expires <= now}
    taken = {slot for slot, _, _ in seats} - abandoned
    return next((slot for slot in range(n) if slot not in taken), None), bool(abandoned)


def _abandoned_free(item_id: int, now: datetime) -> None:
    """Delete the item's abandoned seats (a seat being completed right now is left alone:
    PostgreSQL re-checks the WHERE after a lock wait)."""
    Assignment.objects.filter(item_id=item_id, completed_at__isnull=True, expires_at__lte=now).delete()


def seat_try_claim(
    *,
    item: Item,
    annotator: User,
    n: int,
    now: datetime,
    expires_at: datetime,
    completed: bool,
) -> Assignment | None:
    """Insert a seat on the lowest free slot, retrying the next slot inside a savepoint after a
    lost race; None when no slot is left or the annotator already holds one."""
    for _attempt in range(n):
        seats = list(Assignment.objects.filter(item=item).values_list("slot", "completed_at", "expires_at"))
        slot, abandoned = free_slot(seats, n, now)
        if abandoned:
            _abandoned_free(item.pk, now)
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


def seat_complete(seat: Assignment, now: datetime) -> None:
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


def seat_complete_reading(
    *, item: Item, annotator: User, now: datetime
) -> tuple[bool, list[tuple[int, int, str]], int]:
    """Complete the annotator's open seat on the locked item (``rows.seat_complete``):
    (whether a seat was opened — then also the item's labels as (question_id, annotator_id,
    value) and how many final labels it has; otherwise [] and 0)."""
    params = {"now": connection.ops.adapt_datetimefield_value(now), "item": item.pk, "user": annotator.pk}
    with connection.cursor() as cursor:
        cursor.execute(rows.seat_complete(), params)
        row = cursor.fetchone()
    if row is None:
        return False, [], 0
    return True, [(q, a, v) for q, a, v in rows.json_value(row[1])], row[2]


# --- the claim path ----------------------------------------------------------------------------


def _seats_take(
    *,
    study: Study,
    annotator: User,
    candidates: dict[int, list[SeatRow]],
    need: int,
    now: datetime,
) -> tuple[int, int]:
    """Claim seats on up to ``need`` of ``candidates`` (item id → its seats, ascending): one
    INSERT … ON CONFLICT DO NOTHING for all, then ``seat_try_claim`` for lost ones. Returns
    (seats won, last item id considered)."""
    n = study.labels_per_item
    expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
    chosen: list[Assignment] = []
    abandoned_on: set[int] = set()
    last = 0
    for item_id, seats in candidates.items():
        last = item_id
        slot, abandoned = free_slot(seats, n, now)
        if slot is None:
            continue
        if abandoned:
            abandoned_on.add(item_id)
        chosen.append(
            Assignment(item_id=item_id, annotator=annotator, slot=slot, claimed_at=now, expires_at=expires_at)
        )
        if len(chosen) >= need:
            break
    if not chosen:
        return 0, last
    # One INSERT for all the seats; with abandoned seats to free, item by item instead (free,
    # then claim): every row this transaction writes or waits for stays in ascending item order.
    batches = [[seat] for seat in chosen] if abandoned_on else [chosen]
    won: set[int] = set()
    with connection.cursor() as cursor:
        for batch in batches:
            if batch[0].item_id in abandoned_on:
                _abandoned_free(batch[0].item_id, now)
            cursor.execute(*rows.seats_claim(batch))
            won |= {item_id for (item_id,) in cursor.fetchall()}
    # A lost seat is retried on its item's other slots only above every seat won: going back to a
    # lower item could deadlock (key-press.md). The one skipped stays claimable for the next key press.
    top = max(won, default=0)
    for seat in chosen:
        if (
            seat.item_id not in won
            and seat.item_id > top
            and seat_try_claim(
                item=Item(pk=seat.item_id),
                annotator=annotator,
                n=n,
                now=now,
                expires_at=expires_at,
                completed=False,
            )
        ):
            won.add(seat.item_id)
            top = seat.item_id
    return len(won), last


def _claim_candidates(
    *,
    study: Study,
    annotator: User,
    now: datetime,
    need: int,
    after_id: int,
    queue: int = 1,
    probed_empty: bool = False,
) -> dict[int, list[SeatRow]]:
    """The next claimable items after ``after_id`` with their seats. On PostgreSQL first those
    no other transaction holds (SKIP LOCKED), then, if too few, held ones too, so nobody is told
    "no work left" while seats remain."""
    _sql, params = progress_statement(study=study, annotator=annotator, now=now)  # the same parameters
    params |= {"queue": queue, "after": after_id}

    def query(*, limit: int, skip_locked: bool) -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(rows.candidates(skip_locked=skip_locked), {**params, "limit": limit})
            return [row[0] for row in cursor.fetchall()]

    # ``probed_empty``: the key press's probe just ran this SKIP LOCKED pass and found nothing.
    unlocked = [] if probed_empty else query(limit=need, skip_locked=True)
    ids = unlocked
    if len(unlocked) < need:
        spare = need - len(unlocked) + CLAIM_SPARE_CANDIDATES
        everything = query(limit=len(unlocked) + spare, skip_locked=False)
        busy = [pk for pk in everything if pk not in unlocked][:spare]
        ids = sorted([*unlocked, *busy])
    seats: dict[int, list[SeatRow]] = {pk: [] for pk in ids}
    if ids:
        found = Assignment.objects.filter(item_id__in=ids).values_list(
            "item_id", "slot", "completed_at", "expires_at"
        )
        for item_id, slot, completed_at, expires_at in found:
            seats[item_id].append((slot, completed_at, expires_at))
    return seats


def _seats_search(
    *,
    study: Study,
    annotator: User,
    need: int,
    now: datetime,
    after: tuple[int, int] | None = None,
    probed_empty: int | None = None,
) -> int:
    """Claim seats on up to ``need`` more items over every queue level, held items included; how
    many were won. Claims go in ascending (level, item id), so claimers never deadlock."""
    won = 0
    # A sampling round's items first (queue 2), then the others (queue 1): ascending (level, id),
    # one order for every claimer, so still no deadlock. Studies without a round pay nothing.
    for queue in (2, 1) if study.priority_queue else (1,):
        # ``after``: (level, id) the caller's claims already reached; claims only go on past it.
        if after is not None and queue > after[0]:
            continue
        after_id = after[1] if after is not None and queue == after[0] else 0
        while won < need:
            candidates = _claim_candidates(
                study=study,
                annotator=annotator,
                now=now,
                need=need - won,
                after_id=after_id,
                queue=queue,
                probed_empty=queue == probed_empty and after_id == 0,
            )
            if not candidates:
                break
            taken, after_id = _seats_take(
                study=study, annotator=annotator, candidates=candidates, need=need - won, now=now
            )
            won += taken
    return won


def _queue_probe(
    *, study: Study, annotator: User, size: int, now: datetime, queue: int
) -> tuple[Progress, int, dict[int, list[SeatRow]]]:
    """(progress, the annotator's open seats, the first claimable items of ``queue`` by id
    with their seats) — see ``rows.queue_probe``."""
    _sql, params = progress_statement(study=study, annotator=annotator, now=now)
    params |= {"queue": queue, "after": 0, "size": size}
    with connection.cursor() as cursor:
        cursor.execute(rows.queue_probe(), params)
        found = cursor.fetchall()
    seats: dict[int, list[SeatRow]] = {}
    seat_times = rows.converter(Assignment, ("completed_at", "expires_at"))
    for row in found:
        if row[3] is None:
            continue
        item_seats = seats.setdefault(row[3], [])
        if row[4] is not None:
            completed_at, expires_at = seat_times(row[5:7])
            item_seats.append((row[4], completed_at, expires_at))
    return progress_from_counts(found[0]), found[0][1], seats


# --- the queue ---------------------------------------------------------------------------------


def _open_seats(*, study: Study, annotator: User, now: datetime) -> list[Assignment]:
    """The annotator's open seats with items, prompts and images, in showing order. Seats past
    half their time are renewed (sliding expiry), so most calls write nothing."""
    params: dict[str, int | str] = {
        "user": annotator.pk,
        "study": study.pk,
        "resolved": str(FinalLabelSource.RESOLVED),
        "imported": str(FinalLabelSource.IMPORTED),
    }
    with connection.cursor() as cursor:
        cursor.execute(rows.open_seats(), params)
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


def queue_fill(
    *, study: Study, annotator: User, size: int, now: datetime, gold: bool = False
) -> tuple[list[Assignment], Progress]:
    """assignment_queue without the membership check, plus the annotator's progress: usually
    three statements (probe, seat INSERT, open seats); a short probe hands over to
    ``_seats_search``."""
    first_level = 2 if study.priority_queue else 1
    progress, open_count, candidates = _queue_probe(
        study=study, annotator=annotator, size=size, now=now, queue=first_level
    )
    need = size - open_count
    if need > 0:
        short = len(candidates) < need
        if short and rows.skips_locked_rows():
            # PostgreSQL: the probe skipped items others hold (or the level ran dry). The full search
            # takes those too, in one ascending order with the probe's (claiming out of order deadlocks).
            _seats_search(
                study=study,
                annotator=annotator,
                need=need,
                now=now,
                # A probe that found nothing unlocked need not be run again (the end of a study).
                probed_empty=first_level if not candidates else None,
            )
        else:
            won, _last = _seats_take(
                study=study, annotator=annotator, candidates=candidates, need=need, now=now
            )
            # Short on SQLite (writers take turns): the probe saw its whole level, only a round's
            # other level is left. Not short: seats lost to concurrent claims; search past the probe.
            if won < need and (not short or first_level == 2):
                after = None if short else (first_level, max(candidates))
                _seats_search(study=study, annotator=annotator, need=need - won, now=now, after=after)
    if gold and study.gold_rate > 0:
        gold_seat_claim(study=study, annotator=annotator, now=now)
    return _open_seats(study=study, annotator=annotator, now=now), progress


@transaction.atomic
def assignment_queue(
    *, study: Study, annotator: User, size: int = 2, now: datetime | None = None, gold: bool = False
) -> list[Assignment]:
    """The annotator's open seats topped up to ``size`` with seats on the next items by id; the
    first is shown, the rest preloaded; [] when no work is left. ``gold``: the labeling screen's
    queue, which may add a gold seat. Raises NotAssigned."""
    locks.require_member(study, annotator)
    return queue_fill(study=study, annotator=annotator, size=size, now=now or timezone.now(), gold=gold)[0]
