"""Disputes: (item, question)s whose labels the agreement rule does not settle, decided by a researcher."""

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
    *, item: Item, question: Question, researcher: User, value: str | None, note: str = ""
) -> FinalLabel:
    """A researcher sets (or changes) the final answer of a disputed (item, question); history kept.
    ``value`` None: nobody can settle it, the answer is the question's ``unresolvable_value``."""
    if value is None:
        if not question.unresolvable_value:
            raise InvalidLabel(f"The question “{question.key}” has no answer for disputes nobody can settle.")
        value, note = question.unresolvable_value, note or "Annotators could not agree."

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
    """Settle a dispute nobody can settle with the question's ``unresolvable_value``."""
    return dispute_resolve(item=item, question=question, researcher=researcher, value=None, note=note)
