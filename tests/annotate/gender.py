"""Shortcuts for tests of the gender study: one question, key "gender"."""

from __future__ import annotations

from typing import Any

from annotate import services
from annotate.models import FinalLabel, Label
from tests.factories import question_of


def submit(*, item: Any, annotator: Any, value: str, reason: str = "", **kwargs: Any) -> Label:
    """annotation_submit with the one gender answer; returns that label."""
    [label] = services.annotation_submit(
        item=item, annotator=annotator, answers={"gender": value}, reasons={"gender": reason}, **kwargs
    )
    return label


def submit_next(
    *, study: Any, annotator: Any, item_id: int, value: str, reason: str = "", **kwargs: Any
) -> Any:
    return services.annotation_submit_next(
        study=study,
        annotator=annotator,
        item_id=item_id,
        answers={"gender": value},
        reasons={"gender": reason},
        **kwargs,
    )


def resolve(*, item: Any, researcher: Any, value: str, note: str = "") -> FinalLabel:
    return services.dispute_resolve(
        item=item, question=question_of(item), researcher=researcher, value=value, note=note
    )


def resolve_unresolvable(*, item: Any, researcher: Any, note: str = "") -> FinalLabel:
    return services.dispute_resolve_unresolvable(
        item=item, question=question_of(item), researcher=researcher, note=note
    )


def final_set(*, item: Any, value: str, decided_by: Any, **kwargs: Any) -> FinalLabel:
    return services.final_label_set(
        item=item, question=question_of(item), value=value, decided_by=decided_by, **kwargs
    )


def label_import(*, item: Any, annotator: Any, value: str, reason: str = "") -> Label:
    return services.label_import(
        item=item, question=question_of(item), annotator=annotator, value=value, reason=reason
    )


def final_of(item: Any) -> FinalLabel | None:
    return FinalLabel.objects.filter(item=item).first()
