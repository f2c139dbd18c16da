"""Disputes: an (item, question) whose N labels the study's agreement rule does not settle,
decided by a researcher (the final label's source is "resolved")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from annotate.errors import InvalidLabel, NotDisputed
from annotate.models import FinalLabel, FinalLabelSource, ItemState
from annotate.selectors import item_question_states
from annotate.services import locks
from annotate.services.answers import answer_validate
from annotate.services.finals import final_label_write, question_in
from studies.models import Item, Question

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def dispute_resolve(
    *, item: Item, question: Question, researcher: User, value: str, note: str = ""
) -> FinalLabel:
    """A researcher sets the final answer of a disputed (item, question) (N labels that do not
    settle it), or changes the decision on an already resolved one. Source "resolved", who and
    when recorded, every decision kept in FinalLabelRevision. Raises InvalidLabel, NotDisputed."""
    item = locks.lock_item(item)
    question_in(item, question)
    value = answer_validate(question, value, item=item)
    state = item_question_states(item).get(question.key)
    if state not in (ItemState.DISPUTED, ItemState.RESOLVED):
        shown = (state or "not asked").replace("_", " ")
        raise NotDisputed(
            f"Item {item.key} is {shown} on “{question.key}”, not disputed: only answers whose "
            "labels do not settle them (or already resolved ones) can be resolved."
        )
    return final_label_write(
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
