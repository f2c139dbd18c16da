"""The ``answers`` output kind: what a VQA model or an LLM judge says about an image.

``{"<question key>": "<answer value>", …}``: one answer per question it answered (it may leave
some out). ``validate_answers`` checks the shape on every write (``detectors.kinds`` calls it by
dotted path); ``answers_fit_questions`` checks the keys and values against a study's questions,
where the output meets its study (``import_predictions``). Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detectors.kinds import OutputInvalid

_MAX_KEY = 50  # Question.key and a label's value are at most 50 characters


def validate_answers(output: Any) -> dict[str, Any]:
    """A JSON object of question key → answer value, both non-empty strings; at least one
    answer. Raises OutputInvalid naming the field."""
    if not isinstance(output, Mapping):
        raise OutputInvalid("output", "must be a JSON object {question: answer}")
    if not output:
        raise OutputInvalid("output", "has no answer (an object {question: answer} with at least one)")
    cleaned: dict[str, Any] = {}
    for key, value in output.items():
        if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
            raise OutputInvalid("output", f"question keys must be 1 to {_MAX_KEY} characters, got {key!r}")
        if not isinstance(value, str) or not value:
            raise OutputInvalid(
                key, f"the answer must be a non-empty string (an answer value), got {value!r}"
            )
        cleaned[key] = value
    return cleaned


def answers_fit_questions(output: Mapping[str, Any], questions: Mapping[str, Sequence[str]]) -> None:
    """Raise OutputInvalid for the first question of ``output`` that is not one of
    ``questions`` (``{key: [answer values]}``) or whose answer is not one of its values."""
    for key, value in output.items():
        if key not in questions:
            raise OutputInvalid(key, f"unknown question (the study's: {', '.join(questions) or 'none'})")
        if value not in questions[key]:
            raise OutputInvalid(key, f"unknown answer {value!r} (one of {', '.join(questions[key])})")
