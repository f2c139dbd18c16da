"""The ``answers`` output kind: what a VQA model or a VLM judge says about an image (its rules:
docs/reference/detector-rules.md). Pure: no Django."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from detectors.kinds import (
    FILTER_REASONS,
    OutputInvalid,
    answers_extended,
    answers_of,
    filtered_of,
    json_value,
    probabilities_of,
)

_MAX_KEY = 50  # Question.key and a label's value are at most 50 characters
_FIELDS = ("answers", "probabilities", "filtered", "detail")
#: How far a question's probabilities may sum from 1 (float rounding of a softmax, a server's
#: logprobs turned into p).
PROBABILITY_TOLERANCE = 1e-6


def _key(key: Any, path: str, what: str = "question keys") -> str:
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
        raise OutputInvalid(path, f"{what} must be 1 to {_MAX_KEY} characters, got {key!r}")
    return key


def _answers(answers: Mapping[Any, Any], prefix: str) -> dict[str, str]:
    cleaned: dict[str, str] = {}
    for key, value in answers.items():
        _key(key, prefix.rstrip(".") or "output")
        if not isinstance(value, str) or not value:
            raise OutputInvalid(
                f"{prefix}{key}", f"the answer must be a non-empty string (an answer value), got {value!r}"
            )
        cleaned[key] = value
    return cleaned


def _probabilities(value: Any, answers: Mapping[str, str]) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise OutputInvalid("probabilities", "must be a JSON object {question: {answer value: p}}")
    cleaned: dict[str, dict[str, float]] = {}
    for key, by_value in value.items():
        path = f"probabilities.{key}"
        _key(key, "probabilities")
        if key not in answers:
            raise OutputInvalid(path, "has probabilities but no answer (its keys must be answered questions)")
        if not isinstance(by_value, Mapping) or not by_value:
            raise OutputInvalid(path, "must be a non-empty object {answer value: p}")
        ps: dict[str, float] = {}
        for answer, p in by_value.items():
            _key(answer, path, "answer values")
            if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p):
                raise OutputInvalid(f"{path}.{answer}", f"must be a finite number, got {p!r}")
            if not 0.0 <= p <= 1.0:
                raise OutputInvalid(f"{path}.{answer}", f"must be between 0 and 1, got {p!r}")
            ps[answer] = float(p)
        total = math.fsum(ps.values())
        if abs(total - 1.0) > PROBABILITY_TOLERANCE:
            raise OutputInvalid(path, f"must sum to 1 over the question's choices, got {total:.9g}")
        cleaned[key] = ps
    return cleaned


def _filtered(value: Any, answers: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise OutputInvalid("filtered", "must be a JSON object {question: reason}")
    cleaned: dict[str, str] = {}
    for key, reason in value.items():
        _key(key, "filtered")
        if key in answers:
            raise OutputInvalid(f"filtered.{key}", "the question has an answer: it cannot be filtered too")
        if reason not in FILTER_REASONS:
            raise OutputInvalid(
                f"filtered.{key}", f"must be one of {', '.join(FILTER_REASONS)}, got {reason!r}"
            )
        cleaned[key] = reason
    return cleaned


def validate_answers(output: Any) -> dict[str, Any]:
    """An answers output in either shape → the stored shape (docs/reference/detector-rules.md). Raises
    OutputInvalid naming the field (``age`` for a plain output, ``answers.age``,
    ``probabilities.age.old`` … for the extended one)."""
    if not isinstance(output, Mapping):
        raise OutputInvalid("output", "must be a JSON object {question: answer}")
    if not answers_extended(output):
        if not output:
            raise OutputInvalid("output", "has no answer (an object {question: answer} with at least one)")
        return {"answers": _answers(output, "")}
    unknown = sorted(str(key) for key in output if key not in _FIELDS)
    if unknown:
        raise OutputInvalid(unknown[0], f"unknown field (allowed: {', '.join(_FIELDS)})")
    cleaned: dict[str, Any] = {"answers": _answers(output["answers"], "answers.")}
    probabilities = _probabilities(output.get("probabilities", {}), cleaned["answers"])
    filtered = _filtered(output.get("filtered", {}), cleaned["answers"])
    if not cleaned["answers"] and not filtered:
        raise OutputInvalid("answers", "has no answer and no filtered question (at least one of either)")
    detail = output.get("detail", {})
    if not isinstance(detail, Mapping):
        raise OutputInvalid("detail", "must be a JSON object")
    detail = json_value(detail, "detail")
    for name, value in (("probabilities", probabilities), ("filtered", filtered), ("detail", detail)):
        if value:
            cleaned[name] = value
    return cleaned


def answers_fit_questions(output: Mapping[str, Any], questions: Mapping[str, Sequence[str]]) -> None:
    """OutputInvalid for the first question of ``output`` not in ``questions`` (``{key: [answer
    values]}``) or naming a value the question lacks."""
    known = ", ".join(questions) or "none"
    for key, value in answers_of(output).items():
        if key not in questions:
            raise OutputInvalid(key, f"unknown question (the study's: {known})")
        if value not in questions[key]:
            raise OutputInvalid(key, f"unknown answer {value!r} (one of {', '.join(questions[key])})")
    for key, by_value in probabilities_of(output).items():
        if key not in questions:
            raise OutputInvalid(f"probabilities.{key}", f"unknown question (the study's: {known})")
        for value in by_value:
            if value not in questions[key]:
                raise OutputInvalid(
                    f"probabilities.{key}.{value}", f"unknown answer (one of {', '.join(questions[key])})"
                )
    for key in filtered_of(output):
        if key not in questions:
            raise OutputInvalid(f"filtered.{key}", f"unknown question (the study's: {known})")
