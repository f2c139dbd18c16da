"""Membership checks and the item row lock every label writer takes."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.db import connection
from django.db.models import F

from annotate import sql
from annotate.errors import NotAssigned
from studies.models import Item, Study

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import WithAnnotations


def require_member(study: Study, user: User) -> None:
    """NotAssigned unless ``user`` annotates ``study``."""
    if not study.annotators.filter(pk=user.pk).exists():
        raise not_member(study, user)


def not_member(study: Study, user: User) -> NotAssigned:
    return NotAssigned(f"{user.get_username()} is not an annotator of the study “{study.name}”.")


def lock_item(item: Item) -> Item:
    """Lock the item row FOR NO KEY UPDATE (a no-op on SQLite)."""
    return Item.objects.select_for_update(no_key=True, of=("self",)).select_related("study").get(pk=item.pk)


class Membership(TypedDict):
    annotator_is_member: bool


def lock_item_for_label(
    *, item_id: int, annotator: User, study: Study | None = None
) -> WithAnnotations[Item, Membership]:
    """Lock the item for a label write, counting the seat completed in advance; reads membership too."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.lock_item(in_study=study is not None),
            {"item": item_id, "study": study.pk if study else None, "user": annotator.pk},
        )
        row = cursor.fetchone()
    if row is None:
        raise Item.DoesNotExist("No such item" + ("" if study is None else " in this study") + ".")
    item = sql.from_row(Item, row)
    item.annotator_is_member = bool(row[sql.width(Item)])  # type: ignore[attr-defined]
    # With a study given, the caller's study object serves: no query for it.
    item.study = study if study is not None else Study.objects.get(pk=item.study_id)
    return item  # type: ignore[return-value]


def seat_uncount(item: Item) -> None:
    """Take back the seat ``lock_item_for_label`` counted in advance."""
    Item.objects.filter(pk=item.pk).update(completed_seats=F("completed_seats") - 1)
