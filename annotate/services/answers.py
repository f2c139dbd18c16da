"""Answers checked before anything is written: value, reason, labelling time. No queries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from annotate.errors import InvalidLabel, UnknownQuestion
from studies.kinds import AnswerInvalid, kind_of
from studies.models import Item, Question

REASON_MAX_CHARS = 2000
DURATION_MAX_MS = 2_147_483_647  # PositiveIntegerField's ceiling on every backend


@dataclass(frozen=True)
class Answer:
    """One cleaned answer: its question, value and the reason kept with it."""

    question: Question
    value: str
    reason: str


def clean_reason(question: Question, value: str, reason: str) -> str:
    """The reason stored with ``value``: kept only for an answer that ``requires_reason``."""
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
    """The cleaned answer to ``question``, as its kind takes it; InvalidLabel otherwise."""
    value = (value if isinstance(value, str) else "").strip()
    if "\x00" in value:
        raise InvalidLabel(f"The answer to “{question.key}” contains a NUL character.")
    try:
        return kind_of(question).validate(question, value, item)
    except AnswerInvalid as exc:
        raise InvalidLabel(str(exc)) from None


def answers_validate(
    item: Item, questions: list[Question], answers: Mapping[str, str], reasons: Mapping[str, str] | None
) -> list[Answer]:
    """One cleaned answer per question the item asks (a toggle left out takes its default)."""
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
    cleaned: list[Answer] = []
    for question in questions:
        raw = answers.get(question.key)
        if raw is None:
            if question.default_value:
                raw = question.default_value
            else:
                raise InvalidLabel(f"No answer to the question “{question.key}” ({question.text}).")
        value = answer_validate(question, raw, item=item)
        cleaned.append(Answer(question, value, clean_reason(question, value, reasons.get(question.key, ""))))
    return cleaned


def duration_validate(duration_ms: int | None) -> int | None:
    if duration_ms is None:
        return None
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int) or duration_ms < 0:
        raise InvalidLabel(
            f"The labelling time must be a whole number of milliseconds ≥ 0, not {duration_ms!r}."
        )
    return min(duration_ms, DURATION_MAX_MS)
