"""Writes of the human side: handing out images, saving labels, deciding final labels.

Every function here is one transaction, takes keyword-only arguments and raises the domain
errors of ``annotate.errors`` with a message meant for the user. Every write that changes a
label or a final label appends a revision row recording who and when, so nothing is lost.

Concurrency: the unique constraints on ``Assignment`` ((image, slot) and (image, annotator))
are the guarantee that an image never gets more than N labels. Claiming a seat is "INSERT
the lowest free slot … ON CONFLICT DO NOTHING; if the row did not go in, re-read the slots
and try the next one inside a savepoint, then move on", which behaves the same on SQLite and
PostgreSQL. On PostgreSQL claimers first skip images
other claimers hold (SKIP LOCKED), and every transaction claims in ascending image id, so
concurrent claims neither queue behind each other nor deadlock. Writes that read an image's
labels to derive its final label first lock the image row, so two annotators finishing the
same image at once see each other's label. tests/annotate/test_concurrency.py proves both
with threads on PostgreSQL.

Cost: the labeling screen's key press (``annotation_submit_next``) is one transaction of
about a dozen statements (tests/annotate/test_views.py pins the count); the two reads that
run on every key press and grow with the study (claim candidates here, the progress counter
in selectors) are fixed SQL strings, because building them through the ORM cost more CPU than
running them. bench/bench_label_submit.py measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.utils import timezone

from annotate.errors import (
    AlreadyResolved,
    ImageFull,
    InvalidLabel,
    NotAssigned,
    NotDisputed,
    NothingToUndo,
)
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
from annotate.selectors import DECIDED_SOURCES, image_state

REASON_MAX_CHARS = 2000
DURATION_MAX_MS = 2_147_483_647  # PositiveIntegerField's ceiling on every backend
# Contended candidates fetched beyond what is needed: spares absorb seats that other
# annotators take between our SELECT and our INSERT.
CLAIM_SPARE_CANDIDATES = 2


# --- helpers -------------------------------------------------------------------------------


def _require_member(study: Study, user: AbstractBaseUser) -> None:
    if not study.annotators.filter(pk=user.pk).exists():
        raise _not_member(study, user)


def _lock_image(image: Image) -> Image:
    """Lock the image row for this transaction (a no-op on SQLite, whose writes are serial).

    FOR NO KEY UPDATE: it serialises label writes on one image but does not block seat
    inserts, whose foreign key only takes a KEY SHARE lock on the image.
    """
    return (
        Image.objects.select_for_update(no_key=True, of=("self",))
        .select_related("study", "final_label")
        .get(pk=image.pk)
    )


def _lock_image_for_label(*, image_id: int, annotator: AbstractBaseUser, study: Study | None = None) -> Image:
    """``_lock_image`` for a label write, with ``annotator_is_member`` read in the same query:
    the hot path of every key press checks membership without a query of its own. Raises
    Image.DoesNotExist (also when ``study`` is given and the image is not in it)."""
    member = Study.annotators.through.objects.filter(study_id=OuterRef("study_id"), user_id=annotator.pk)
    images = Image.objects.select_for_update(no_key=True, of=("self",))
    if study is None:
        images = images.select_related("study", "final_label")
    else:  # the caller's study object serves; no join for it
        images = images.filter(study=study).select_related("final_label")
    image = images.annotate(annotator_is_member=Exists(member)).get(pk=image_id)
    if study is not None:
        image.study = study
    return image


def _not_member(study: Study, user: AbstractBaseUser) -> NotAssigned:
    return NotAssigned(f"{user.get_username()} is not an annotator of the study “{study.name}”.")


def _final_label_of(image: Image) -> FinalLabel | None:
    """The final label read together with the image lock (no extra query)."""
    try:
        return image.final_label
    except FinalLabel.DoesNotExist:
        return None


def _validate_label(study: Study, value: str, reason: str) -> str:
    """Check value and reason against the study's label set; return the cleaned reason."""
    spec = study.label_spec(value)
    if spec is None:
        valid = ", ".join(study.label_values)
        raise InvalidLabel(f"“{value}” is not a label of the study “{study.name}”. Valid labels: {valid}.")
    reason = (reason or "").strip()
    if spec.get("requires_reason") and not reason:
        raise InvalidLabel(f"The label “{spec.get('name', value)}” needs a short reason.")
    if len(reason) > REASON_MAX_CHARS:
        raise InvalidLabel(f"The reason is too long ({len(reason)} characters, at most {REASON_MAX_CHARS}).")
    return reason


def _validate_duration(duration_ms: int | None) -> int | None:
    if duration_ms is None:
        return None
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0:
        raise InvalidLabel(
            f"The labelling time must be a whole number of milliseconds ≥ 0, not {duration_ms!r}."
        )
    return min(duration_ms, DURATION_MAX_MS)


def _refuse_if_decided(image: Image, final: FinalLabel | None) -> None:
    if final is not None and final.source in DECIDED_SOURCES:
        who = "an import" if final.source == FinalLabelSource.IMPORTED else "a researcher"
        raise AlreadyResolved(
            f"The final label of image {image.source_path} was already set to “{final.value}” by {who}; "
            "its labels can no longer change."
        )


def _lowest_free_slot(image: Image, n: int, now: datetime) -> int | None:
    """The lowest slot 0..N-1 with no seat, after freeing abandoned seats (reserved, never
    labelled, past their expiry), which return to the pool here.

    The DELETE's WHERE clause is re-checked after any row lock wait on PostgreSQL, so a seat
    whose owner is completing it at this moment is left alone (its slot then stays taken and
    the insert on it fails, which the caller handles).
    """
    seats = list(Assignment.objects.filter(image=image).values_list("slot", "completed_at", "expires_at"))
    abandoned = [
        slot for slot, completed_at, expires_at in seats if completed_at is None and expires_at <= now
    ]
    if abandoned:
        Assignment.objects.filter(image=image, completed_at__isnull=True, expires_at__lte=now).delete()
    taken = {slot for slot, _, _ in seats} - set(abandoned)
    return next((slot for slot in range(n) if slot not in taken), None)


def _seat_try_claim(
    *,
    image: Image,
    annotator: AbstractBaseUser,
    n: int,
    now: datetime,
    expires_at: datetime,
    completed: bool,
) -> Assignment | None:
    """Insert a seat on the lowest free slot, each attempt inside a savepoint; None when the
    image has no free slot left (or the annotator already holds one on it).

    Losing a slot to a concurrent claim (IntegrityError) re-reads the taken slots and tries
    the next one: giving up on the first conflict would leave images short of N annotators.
    """
    for _attempt in range(n):
        slot = _lowest_free_slot(image, n, now)
        if slot is None:
            return None
        try:
            with transaction.atomic():
                return Assignment.objects.create(
                    image=image,
                    annotator=annotator,
                    slot=slot,
                    claimed_at=now,
                    expires_at=expires_at,
                    completed_at=now if completed else None,
                )
        except IntegrityError:
            if Assignment.objects.filter(image=image, annotator=annotator).exists():
                return None
    return None


def _seat_complete(seat: Assignment, now: datetime) -> None:
    """Mark the seat labelled and recount the image's completed seats (under the image lock,
    so concurrent labels on the same image count each other)."""
    if seat.completed_at is None:
        seat.completed_at = now
        seat.save(update_fields=["completed_at"])
    completed = (
        Assignment.objects.filter(image=OuterRef("pk"), completed_at__isnull=False)
        .order_by()
        .values("image")
        .annotate(n=Count("pk"))
        .values("n")
    )
    Image.objects.filter(pk=seat.image_id).update(completed_seats=Subquery(completed))


def _label_write(
    *,
    label: Label | None,
    image: Image,
    annotator: AbstractBaseUser,
    value: str,
    reason: str,
    duration_ms: int | None,
    request_id: str,
) -> Label:
    """Create the annotator's label on the image, or change ``label`` (their current one), and
    append a revision. The caller holds the image lock and has ruled out a repeat."""
    if label is not None:
        label.value, label.reason, label.request_id = value, reason, request_id
        # The first duration stays: it is the time the annotator needed to decide, which a
        # later correction after "go back" does not measure.
        label.save(update_fields=["value", "reason", "request_id", "updated_at"])
    else:
        label = Label.objects.create(
            image=image,
            annotator=annotator,
            value=value,
            reason=reason,
            duration_ms=duration_ms,
            request_id=request_id,
        )
    LabelRevision.objects.create(
        label=label, value=value, reason=reason, changed_by=annotator, request_id=request_id
    )
    return label


def _is_repeat(label: Label | None, value: str, reason: str, request_id: str = "") -> bool:
    """A double key press or a retried POST: same value and reason as now, or the request id
    of the current label or of any earlier change to it (a retry that arrives after a later
    correction must not undo that correction)."""
    if label is None:
        return False
    if (label.value, label.reason) == (value, reason):
        return True
    if not request_id:
        return False
    return label.request_id == request_id or label.revisions.filter(request_id=request_id).exists()


def _final_revision_append(final: FinalLabel) -> None:
    FinalLabelRevision.objects.create(
        image_id=final.image_id,
        value=final.value,
        source=final.source,
        decided_by=final.decided_by,
        note=final.note,
        decided_at=final.decided_at,
    )


def _final_label_sync(
    *,
    image: Image,
    study: Study,
    final: FinalLabel | None,
    changed_by: AbstractBaseUser,
    now: datetime,
    values: list[str] | None = None,
) -> None:
    """Derive the agreed final label from the labels: all N equal → agreed final label;
    otherwise an existing agreed final label is removed (a revision with an empty value keeps
    the history). Final labels set by a researcher or an import are never touched here.

    ``final`` is the image's final label as read under the image lock (every writer of final
    labels takes that lock first, so it cannot have changed since). ``values``: the image's
    label values after the write, when the caller already has them (read under the same lock);
    None reads them.

    Nothing is read or written while fewer than N labels exist and there is no final label —
    the common case of the first labels on an image."""
    if final is not None and final.source != FinalLabelSource.AGREED:
        return
    if values is None:
        values = list(Label.objects.filter(image=image).values_list("value", flat=True))
    agreed = len(values) >= study.labels_per_image and len(set(values)) == 1
    if agreed:
        value = values[0]
        if final is not None and final.value == value:
            return
        fields = {
            "value": value,
            "source": FinalLabelSource.AGREED,
            "decided_by": None,
            "note": f"All {len(values)} annotators chose “{value}”.",
            "decided_at": now,
        }
        if final is None:
            final = FinalLabel.objects.create(image=image, **fields)
        else:
            for name, field_value in fields.items():
                setattr(final, name, field_value)
            final.save(update_fields=list(fields))
        _final_revision_append(final)
    elif final is not None:
        final.delete()
        FinalLabelRevision.objects.create(
            image=image,
            value="",
            source="",
            decided_by=None,
            note=f"Agreement broken: {changed_by.get_username()} changed their label.",
            decided_at=now,
        )


def _final_label_write(
    *, image: Image, value: str, source: str, decided_by: AbstractBaseUser | None, note: str, now: datetime
) -> FinalLabel:
    """Set the final label and append a revision; an identical decision is stored once."""
    note = (note or "").strip()
    final = FinalLabel.objects.select_for_update().filter(image=image).first()
    if final is not None and (final.value, final.source, final.decided_by_id, final.note) == (
        value,
        source,
        getattr(decided_by, "pk", None),
        note,
    ):
        return final
    final, _ = FinalLabel.objects.update_or_create(
        image=image,
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


# The images an annotator could be given now, as one fixed statement, after a cursor and with a
# limit. An image is claimable when the annotator never held a seat on it, it has fewer than N live
# seats (labelled, or reserved and unexpired) and no researcher or import fixed its final label.
# Raw SQL because it runs on every key press: the ORM spent ~2 ms of CPU building and compiling
# it, the database well under 1 ms running it. tests/annotate/test_services.py and
# test_concurrency.py hold both to the same rules.
_CANDIDATES_SQL = """
SELECT i.id FROM {image} i
WHERE i.study_id = %(study)s AND i.completed_seats < %(n)s AND i.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM {assignment} a WHERE a.image_id = i.id AND a.annotator_id = %(user)s)
  AND NOT EXISTS (SELECT 1 FROM {final} f
                   WHERE f.image_id = i.id AND f.source IN (%(resolved)s, %(imported)s))
  AND (SELECT COUNT(*) FROM {assignment} a
        WHERE a.image_id = i.id AND (a.completed_at IS NOT NULL OR a.expires_at > %(now)s)) < %(n)s
ORDER BY i.id
LIMIT %(limit)s{lock}
"""


def _claimable_ids(
    *, study: Study, annotator: AbstractBaseUser, now: datetime, after_id: int, limit: int, skip_locked: bool
) -> list[int]:
    features = connection.features
    lock = ""
    if skip_locked and features.has_select_for_update_skip_locked and features.has_select_for_no_key_update:
        lock = " FOR NO KEY UPDATE OF i SKIP LOCKED"
    sql = _CANDIDATES_SQL.format(
        image=Image._meta.db_table,
        assignment=Assignment._meta.db_table,
        final=FinalLabel._meta.db_table,
        lock=lock,
    )
    params = {
        "study": study.pk,
        "n": study.labels_per_image,
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
    *, study: Study, annotator: AbstractBaseUser, now: datetime, need: int, after_id: int
) -> list[Image]:
    """The next images after ``after_id``, by id, the annotator may try to claim a seat on
    (only their ids are loaded).

    On PostgreSQL, first the images nobody else is claiming or labelling at this moment
    (row locks, SKIP LOCKED): 20 annotators asking at once spread over the next images instead
    of queueing behind each other on the same one. Only if that finds too few, the locked ones
    too (the claim then waits for the other transaction and takes the slot left over): an
    annotator must never be told "no work left" just because someone else was busy with the
    last images. On SQLite there is no lock clause; its writes are serial anyway.
    """
    query = {"study": study, "annotator": annotator, "now": now, "after_id": after_id}
    unlocked = _claimable_ids(**query, limit=need, skip_locked=True)
    ids = unlocked
    if len(unlocked) < need:
        spare = need - len(unlocked) + CLAIM_SPARE_CANDIDATES
        everything = _claimable_ids(**query, limit=len(unlocked) + spare, skip_locked=False)
        busy = [pk for pk in everything if pk not in unlocked][:spare]
        ids = sorted([*unlocked, *busy])
    return [Image(pk=pk) for pk in ids]


# --- labelling -----------------------------------------------------------------------------


def _open_seats(*, study: Study, annotator: AbstractBaseUser, now: datetime) -> list[Assignment]:
    """The annotator's open seats with their images (and prompts), in the order they are shown.

    Sliding expiry: an annotator who keeps asking for work keeps the seats already handed to
    them (the preloaded images too); an expired seat nobody took is simply theirs again. Only
    seats past half their time are renewed, so most calls write nothing here.
    """
    mine_open = Assignment.objects.filter(
        image__study=study, annotator=annotator, completed_at__isnull=True
    ).exclude(image__final_label__source__in=DECIDED_SOURCES)
    seats = list(mine_open.select_related("image", "image__prompt").order_by("claimed_at", "image_id"))
    renew_before = now + timedelta(seconds=study.claim_timeout_seconds / 2)
    if any(seat.expires_at < renew_before for seat in seats):
        expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
        mine_open.filter(expires_at__lt=renew_before).update(expires_at=expires_at)
        for seat in seats:
            if seat.expires_at < renew_before:
                seat.expires_at = expires_at
    return seats


SeatRow = tuple[int, datetime | None, datetime]  # slot, completed_at, expires_at


def _seat_rows(images: list[Image]) -> dict[int, list[SeatRow]]:
    """The seats of each candidate image, in one read."""
    seats: dict[int, list[SeatRow]] = {image.pk: [] for image in images}
    rows = Assignment.objects.filter(image_id__in=list(seats)).values_list(
        "image_id", "slot", "completed_at", "expires_at"
    )
    for image_id, slot, completed_at, expires_at in rows:
        seats[image_id].append((slot, completed_at, expires_at))
    return seats


def _seat_claim_fast(
    *,
    image: Image,
    seats: list[SeatRow],
    annotator: AbstractBaseUser,
    n: int,
    now: datetime,
    expires_at: datetime,
) -> Assignment | None:
    """Claim a seat on ``image`` given its seats as read a moment ago; the seat comes back with
    its image and prompt loaded, or None when the image has no free slot.

    Abandoned seats (reserved, never labelled, past their expiry) are deleted first: they
    return to the pool here. Then one INSERT … ON CONFLICT DO NOTHING on the lowest free slot
    (no savepoint) and one read of the seat with its image. Only when a concurrent claim took
    that slot in between does it fall back to ``_seat_try_claim``, which re-reads the slots
    and tries the next ones — so contended last seats are still all handed out.
    """
    abandoned = {slot for slot, done, expires in seats if done is None and expires <= now}
    if abandoned:
        Assignment.objects.filter(image=image, completed_at__isnull=True, expires_at__lte=now).delete()
    taken = {slot for slot, _, _ in seats} - abandoned
    slot = next((slot for slot in range(n) if slot not in taken), None)
    if slot is None:
        return None
    Assignment.objects.bulk_create(
        [Assignment(image=image, annotator=annotator, slot=slot, claimed_at=now, expires_at=expires_at)],
        ignore_conflicts=True,
    )
    # The candidates exclude images the annotator ever held: a seat found here is the new one.
    mine = Assignment.objects.filter(image=image, annotator=annotator).select_related(
        "image", "image__prompt"
    )
    seat = mine.first()
    if seat is None and _seat_try_claim(
        image=image, annotator=annotator, n=n, now=now, expires_at=expires_at, completed=False
    ):
        seat = mine.first()
    return seat


def _seats_claim(*, study: Study, annotator: AbstractBaseUser, need: int, now: datetime) -> list[Assignment]:
    """Claim seats on up to ``need`` more images, with their images and prompts loaded.

    Claims go in strictly ascending image id within the transaction (a cursor, never back),
    abandoned-seat deletes included: two claimers then never wait for each other's rows in a
    cycle, so no deadlock. An image lost to a concurrent claim is not looked at again in this
    call.
    """
    n = study.labels_per_image
    expires_at = now + timedelta(seconds=study.claim_timeout_seconds)
    claimed: list[Assignment] = []
    after_id = 0
    while len(claimed) < need:
        candidates = _claim_candidates(
            study=study, annotator=annotator, now=now, need=need - len(claimed), after_id=after_id
        )
        if not candidates:
            break
        seats = _seat_rows(candidates)
        for image in candidates:
            after_id = image.pk
            seat = _seat_claim_fast(
                image=image, seats=seats[image.pk], annotator=annotator, n=n, now=now, expires_at=expires_at
            )
            if seat is not None:
                claimed.append(seat)
                if len(claimed) >= need:
                    break
    return claimed


def _queue(*, study: Study, annotator: AbstractBaseUser, size: int, now: datetime) -> list[Assignment]:
    """assignment_queue without the membership check (the caller made it)."""
    seats = _open_seats(study=study, annotator=annotator, now=now)
    if len(seats) < size:
        seats += _seats_claim(study=study, annotator=annotator, need=size - len(seats), now=now)
    return sorted(seats, key=lambda seat: (seat.claimed_at, seat.image_id))


@transaction.atomic
def assignment_queue(
    *, study: Study, annotator: AbstractBaseUser, size: int = 2, now: datetime | None = None
) -> list[Assignment]:
    """The annotator's open seats (not labelled yet), topped up to ``size`` by claiming seats on
    the next images, by id, that have a free seat and that the annotator does not hold.

    The first seat is the image to show; the others are preloaded by the browser. The
    annotator's own expired seats are renewed (nobody took them, so they are still theirs);
    other annotators' expired seats are freed when their image is claimed. [] when the
    annotator has no work left. Raises NotAssigned if the user is not an annotator of the study.
    """
    _require_member(study, annotator)
    return _queue(study=study, annotator=annotator, size=size, now=now or timezone.now())


def _submit(
    *,
    image: Image,
    annotator: AbstractBaseUser,
    value: str,
    reason: str,
    duration_ms: int | None,
    request_id: str,
    now: datetime,
) -> Label:
    """annotation_submit on an image locked by ``_lock_image_for_label``.

    Few statements, because it runs on every key press: the seat is completed by one UPDATE
    (its row lock also stops a claimer from freeing it as expired at this moment), the
    image's labels are read once (the annotator's own one for the repeat check, all values
    for the final label), and the completed-seat counter is bumped rather than recounted —
    every writer of labels holds the image lock, so the increment cannot race.
    """
    study = image.study
    if not image.annotator_is_member:
        raise _not_member(study, annotator)
    reason = _validate_label(study, value, reason)
    duration_ms = _validate_duration(duration_ms)
    request_id = (request_id or "")[:64]
    mine = Assignment.objects.filter(image=image, annotator=annotator)
    opened = mine.filter(completed_at__isnull=True).update(completed_at=now)
    if not opened and not mine.exists():
        raise NotAssigned(
            f"Image {image.source_path} is not assigned to {annotator.get_username()} "
            "(never handed out to you, or your reservation expired and went back to the pool)."
        )
    if opened:
        Image.objects.filter(pk=image.pk).update(completed_seats=F("completed_seats") + 1)
    labels = list(Label.objects.filter(image=image))
    existing = next((label for label in labels if label.annotator_id == annotator.pk), None)
    if _is_repeat(existing, value, reason, request_id):
        return existing  # double submit: already stored
    final = _final_label_of(image)
    _refuse_if_decided(image, final)
    label = _label_write(
        label=existing,
        image=image,
        annotator=annotator,
        value=value,
        reason=reason,
        duration_ms=duration_ms,
        request_id=request_id,
    )
    values = [other.value for other in labels if other.annotator_id != annotator.pk] + [value]
    _final_label_sync(image=image, study=study, final=final, changed_by=annotator, now=now, values=values)
    return label


@transaction.atomic
def annotation_submit(
    *,
    image: Image,
    annotator: AbstractBaseUser,
    value: str,
    reason: str = "",
    duration_ms: int | None = None,
    request_id: str = "",
) -> Label:
    """Save the annotator's label on the image and update the image's final label.

    Needs the annotator's seat on the image: open, or completed (changing an earlier label
    after "go back"). A repeat with the same request_id, or with the same value and reason,
    stores nothing new. Each change appends a LabelRevision. Then: all N labels equal →
    agreed final label; otherwise an agreed final label is removed (history kept).

    Raises NotAssigned (not an annotator of the study, or no seat on the image — e.g. the
    reservation expired and went to someone else), InvalidLabel (value not in the label set,
    missing reason, bad duration), AlreadyResolved (a researcher or an import already fixed the
    final label).
    """
    return _submit(
        image=_lock_image_for_label(image_id=image.pk, annotator=annotator),
        annotator=annotator,
        value=value,
        reason=reason,
        duration_ms=duration_ms,
        request_id=request_id,
        now=timezone.now(),
    )


@dataclass(frozen=True)
class SubmitNext:
    """What the labeling screen needs after a key press: the label saved and the queue."""

    label: Label
    queue: list[Assignment]


@transaction.atomic
def annotation_submit_next(
    *,
    study: Study,
    annotator: AbstractBaseUser,
    image_id: int,
    value: str,
    reason: str = "",
    duration_ms: int | None = None,
    request_id: str = "",
    size: int = 2,
) -> SubmitNext:
    """``annotation_submit`` on image ``image_id`` of ``study``, then ``assignment_queue``, in
    one transaction — the labeling screen's key press. One membership check (read with the
    image lock) and one commit instead of two of each.

    Same errors as annotation_submit (nothing is stored when one is raised), plus
    Image.DoesNotExist when the image is not in the study.
    """
    now = timezone.now()
    image = _lock_image_for_label(image_id=image_id, annotator=annotator, study=study)
    label = _submit(
        image=image,
        annotator=annotator,
        value=value,
        reason=reason,
        duration_ms=duration_ms,
        request_id=request_id,
        now=now,
    )
    return SubmitNext(label=label, queue=_queue(study=study, annotator=annotator, size=size, now=now))


@transaction.atomic
def annotation_previous(*, study: Study, annotator: AbstractBaseUser, before: Image | None = None) -> Label:
    """The annotator's label given just before their label on ``before`` (their latest label
    when ``before`` is None or not labelled by them yet) — the "Z: go back one" key; call it
    again with the returned label's image to go further back.

    Labels on images whose final label a researcher or an import fixed are skipped: they can no
    longer change. Raises NotAssigned (not in the study), NothingToUndo.
    """
    _require_member(study, annotator)
    labels = (
        Label.objects.filter(image__study=study, annotator=annotator)
        .exclude(image__final_label__source__in=DECIDED_SOURCES)
        .select_related("image")
        .order_by("-id")
    )
    if before is not None:
        anchor = (
            Label.objects.filter(image=before, image__study=study, annotator=annotator)
            .values_list("id", flat=True)
            .first()
        )
        if anchor is not None:
            labels = labels.filter(id__lt=anchor)
    label = labels.first()
    if label is None:
        raise NothingToUndo("There is no earlier label of yours to go back to.")
    return label


@transaction.atomic
def label_import(*, image: Image, annotator: AbstractBaseUser, value: str, reason: str = "") -> Label:
    """Store a label from an import file: the annotator joins the study and gets a completed
    seat on the image, then the label is validated, written and the final label synced as for
    a submit. Importing the same label again changes nothing.

    Raises ImageFull (N other annotators already hold the image's seats), InvalidLabel,
    AlreadyResolved.
    """
    now = timezone.now()
    image = _lock_image(image)
    study = image.study
    reason = _validate_label(study, value, reason)
    existing = Label.objects.filter(image=image, annotator=annotator).first()
    if _is_repeat(existing, value, reason):
        return existing
    final = _final_label_of(image)
    _refuse_if_decided(image, final)
    study.annotators.add(annotator)
    seat = Assignment.objects.select_for_update().filter(image=image, annotator=annotator).first()
    if seat is None:
        seat = _seat_try_claim(
            image=image,
            annotator=annotator,
            n=study.labels_per_image,
            now=now,
            expires_at=now,
            completed=True,
        )
        if seat is None:
            holders = ", ".join(
                Assignment.objects.filter(image=image)
                .order_by("slot")
                .values_list("annotator__username", flat=True)
            )
            raise ImageFull(
                f"Image {image.source_path} already has its {study.labels_per_image} annotators ({holders})."
            )
    _seat_complete(seat, now)
    label = _label_write(
        label=existing,
        image=image,
        annotator=annotator,
        value=value,
        reason=reason,
        duration_ms=None,
        request_id="",
    )
    _final_label_sync(image=image, study=study, final=final, changed_by=annotator, now=now)
    return label


# --- final labels --------------------------------------------------------------------------


def _validate_final_value(study: Study, value: str) -> None:
    if study.label_spec(value) is None:
        valid = ", ".join(study.label_values)
        raise InvalidLabel(f"“{value}” is not a label of the study “{study.name}”. Valid labels: {valid}.")


@transaction.atomic
def dispute_resolve(*, image: Image, researcher: AbstractBaseUser, value: str, note: str = "") -> FinalLabel:
    """A researcher sets the final label of a disputed image (N labels that differ), or changes
    the decision on an already resolved one. Source "resolved", who and when recorded, every
    decision kept in FinalLabelRevision. Raises InvalidLabel, NotDisputed."""
    image = _lock_image(image)
    study = image.study
    _validate_final_value(study, value)
    state = image_state(image)
    if state not in (ImageState.DISPUTED, ImageState.RESOLVED):
        raise NotDisputed(
            f"Image {image.source_path} is {state.replace('_', ' ')}, not disputed: "
            "only images whose labels differ (or already resolved ones) can be resolved."
        )
    return _final_label_write(
        image=image,
        value=value,
        source=FinalLabelSource.RESOLVED,
        decided_by=researcher,
        note=note,
        now=timezone.now(),
    )


def dispute_resolve_unresolvable(*, image: Image, researcher: AbstractBaseUser, note: str = "") -> FinalLabel:
    """The paper's rule for disputes the annotators cannot settle: the study's
    ``unresolvable_label`` (low quality) becomes the final label. Same errors as dispute_resolve."""
    return dispute_resolve(
        image=image,
        researcher=researcher,
        value=image.study.unresolvable_label,
        note=note or "Annotators could not agree.",
    )


@transaction.atomic
def final_label_set(
    *,
    image: Image,
    value: str,
    decided_by: AbstractBaseUser | None,
    note: str = "",
    source: str = FinalLabelSource.IMPORTED,
) -> FinalLabel:
    """Set an image's final label directly (ground-truth import, admin), whatever its labels
    say; history kept, an identical decision stored once. Raises InvalidLabel."""
    image = _lock_image(image)
    _validate_final_value(image.study, value)
    if source not in FinalLabelSource.values:
        raise InvalidLabel(f"“{source}” is not a final label source ({', '.join(FinalLabelSource.values)}).")
    return _final_label_write(
        image=image, value=value, source=source, decided_by=decided_by, note=note, now=timezone.now()
    )
