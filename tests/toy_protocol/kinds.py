"""The ``mood`` output kind: ``{"mood": "<answer value>"}``, checked on every write and against
the study's ``mood`` question where the output meets its study."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detectors.kinds import OutputInvalid


def validate_mood(output: Any) -> dict[str, Any]:
    if not isinstance(output, Mapping) or set(output) != {"mood"}:
        raise OutputInvalid("output", 'must be a JSON object {"mood": answer}')
    if not isinstance(output["mood"], str) or not output["mood"]:
        raise OutputInvalid("mood", f"must be a non-empty string, got {output['mood']!r}")
    return {"mood": output["mood"]}


def mood_fits_questions(output: Mapping[str, Any], questions: Mapping[str, Sequence[str]]) -> None:
    if output["mood"] not in questions.get("mood", ()):
        raise OutputInvalid(
            "mood", f"unknown answer {output['mood']!r} (one of {', '.join(questions.get('mood', ()))})"
        )
