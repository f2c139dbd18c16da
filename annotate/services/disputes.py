"""Disputes: an (item, question) whose N labels the study's agreement rule does not settle,
decided by a researcher (the final label's source is "resolved")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from annotate.errors import InvalidLabel, NotDisputed
from annotate.models import FinalLabel, FinalLabelSource, ItemState
from annotate.selectors import item_question_states
from annotate.services.finals import final_label_set
from studies.models import GoldAnswer, Item, Question

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def dispute_resolve(
    *, item: Item, question: Question, researcher: User, value: str, note: str = ""
) -> FinalLabel:
    """A researcher sets the final answer of a disputed (item, question) (N labels that do not
    settle it), or changes the decision on an already resolved one. Source "resolved", who and
    when recorded, every decision kept in FinalLabelRevision. Raises InvalidLabel, NotDisputed."""

    def disputed(item: Item) -> None:
        if GoldAnswer.objects.filter(item=item, question=question).exists():
            raise NotDisputed(
                f"Item {item.key} is a gold item: its answer to “{question.key}” is the one annotators "
                "are checked against and cannot change."
            )
        state = item_question_states(item).get(question.key)
        if state not in (ItemState.DISPUTED, ItemState.RESOLVED):
            shown = (state or "not asked").replace("_", " ")
            raise NotDisputed(
                f"Item {item.key} is {shown} on “{question.key}”, not disputed: only answers whose "
                "labels do not settle them (or already resolved ones) can be resolved."
            )

    return final_label_set(
        item=item,
        question=question,
        value=value,
        decided_by=researcher,
        note=note,
        source=FinalLabelSource.RESOLVED,
        check=disputed,
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
