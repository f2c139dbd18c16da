"""Gold items served among ordinary ones at the study's gold rate; answers kept as ``GoldResponse``."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import Count, Exists, Max, OuterRef, Q

from annotate.models import Assignment, GoldResponse
from annotate.services.answers import Answer
from studies.models import GoldAnswer, Item, Study

if TYPE_CHECKING:
    from django.contrib.auth.models import User

SLOT_MAX = 32767  # Assignment.slot is a PositiveSmallIntegerField


def gold_values(item: Item) -> dict[int, str]:
    """The item's gold answers by question id; {} for an ordinary item."""
    return dict(GoldAnswer.objects.filter(item_id=item.pk).values_list("question_id", "value"))


def gold_seat_claim(*, study: Study, annotator: User, now: datetime) -> bool:
    """Give the annotator a seat on a new gold item when their gold share is below ``gold_rate``."""
    gold_items = GoldAnswer.objects.filter(item__study=study).values("item_id")
    mine = Assignment.objects.filter(annotator=annotator, item_id=OuterRef("item_id"))
    golds = list(
        gold_items.distinct()
        .annotate(held=Exists(mine), open=Exists(mine.filter(completed_at__isnull=True)))
        .values_list("item_id", "held", "open")
    )
    if not golds or any(is_open for _, _, is_open in golds):
        return False
    # Counted by the database: an annotator's seats in the study may be many thousands.
    seats = Assignment.objects.filter(annotator=annotator, item__study=study).aggregate(
        held=Count("pk"),
        open_ordinary=Count("pk", filter=Q(completed_at__isnull=True) & ~Q(item_id__in=gold_items)),
    )
    if not seats["open_ordinary"]:
        return False
    n_gold = sum(1 for _, held, _ in golds if held)
    draw = random.Random(f"{annotator.pk}:{n_gold}").random()
    if n_gold + draw >= study.gold_rate * (seats["held"] + 1):
        return False
    fresh = sorted(item_id for item_id, held, _ in golds if not held)
    if not fresh:
        return False
    chosen = fresh[int(draw * len(fresh))]
    # The gold item's row lock serialises the slot choice (ordinary claims never lock gold items).
    list(Item.objects.select_for_update(no_key=True).filter(pk=chosen).values_list("pk"))
    top = Assignment.objects.filter(item_id=chosen).aggregate(top=Max("slot"))["top"]
    slot = max(study.labels_per_item, (top or 0) + 1)
    if slot > SLOT_MAX:
        return False
    Assignment.objects.create(
        item_id=chosen,
        annotator=annotator,
        slot=slot,
        claimed_at=now,
        expires_at=now + timedelta(seconds=study.claim_timeout_seconds),
    )
    return True


def gold_response_write(
    *,
    item: Item,
    annotator: User,
    golds: dict[int, str],
    answers: list[Answer],
    duration_ms: int | None,
    now: datetime,
) -> bool:
    """Complete the annotator's gold seat on ``item`` and keep their gold answers; False without a seat."""
    opened = Assignment.objects.filter(item=item, annotator=annotator, completed_at__isnull=True).update(
        completed_at=now
    )
    if not opened:
        return GoldResponse.objects.filter(item=item, annotator=annotator).exists()
    GoldResponse.objects.bulk_create(
        [
            GoldResponse(
                item=item,
                question=answer.question,
                annotator=annotator,
                value=answer.value,
                correct=answer.value == golds[answer.question.pk],
                duration_ms=duration_ms,
            )
            for answer in answers
            if answer.question.pk in golds
        ],
        ignore_conflicts=True,
    )
    return True
