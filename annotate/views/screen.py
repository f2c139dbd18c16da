"""What the labeling screen draws: questions and choices, overlays, the guidelines' keys."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from annotate.forms import answer_field, reason_field
from studies.kinds import QuestionLike, kind_of
from studies.models import Item, ItemImage, Question, Study
from studies.selectors import study_questions


def choice_rows(question: QuestionLike, chosen: str = "") -> list[dict[str, Any]]:
    return [
        {
            "value": choice["value"],
            "name": choice.get("name", choice["value"]),
            "key": str(choice.get("key", "")).lower(),
            "requires_reason": bool(choice.get("requires_reason")),
            "checked": choice["value"] == chosen,
            "is_default": choice["value"] == question.default_value,
        }
        for choice in question.choices
    ]


def question_rows(
    questions: Iterable[Question],
    answers: Mapping[str, str],
    reasons: Mapping[str, str],
    item: Item | None = None,
) -> list[dict[str, Any]]:
    """The questions as the labeling screen draws them, the answers to show selected."""
    rows = []
    for question in questions:
        kind = kind_of(question)
        chosen = answers.get(question.key, question.default_value)
        choices = choice_rows(question, chosen)
        field = answer_field(question.key)
        rows.append(
            {
                "key": question.key,
                "text": question.text,
                "kind": question.kind,
                "template": kind.template,
                "hotkey": question.hotkey.lower(),
                "field": field,
                "reason_field": reason_field(question.key),
                "choices": choices,
                "value": chosen,
                "display": question.display(chosen) if chosen else "",
                "reason": reasons.get(question.key, ""),
                "needs_reason": [c["name"] for c in choices if c["requires_reason"]],
                **kind.context(question, chosen, field, item),
            }
        )
    return rows


def image_overlay(
    questions: Iterable[Question], item: Item, image: ItemImage | None
) -> dict[str, Any] | None:
    """What the first kind that draws over the image draws there (its ``template``), or None."""
    for question in questions:
        drawn = kind_of(question).overlay(question, item, image)
        if drawn is not None:
            return drawn
    return None


def study_scripts(questions: Iterable[Question]) -> dict[str, list[str]]:
    """The static scripts and stylesheets of the kinds a study asks, each once."""
    kinds = [kind_of(question) for question in questions]
    return {
        "scripts": list(dict.fromkeys(k.script for k in kinds if k.script)),
        "stylesheets": list(dict.fromkeys(k.stylesheet for k in kinds if k.stylesheet)),
    }


def study_keys(study: Study) -> list[dict[str, Any]]:
    """Every key of the study's labeling screen, for the guidelines box."""
    questions = study_questions(study)
    single = len(questions) == 1 and kind_of(questions[0]).one_key
    keys = [key for question in questions for key in kind_of(question).keys(question, alone=single)]
    if not single:
        keys.append({"key": "Enter", "what": "Save the answers and go to the next item"})
    keys.append({"key": "z", "what": "Go back one item to change your answers"})
    # The zoom keys (zoom.js) give way to a study's own answer keys: list only the free ones.
    taken = {str(k["key"]).lower() for k in keys} | {
        str(c.get("key", "")).lower() for q in questions for c in q.choices
    }
    zoom_keys = (
        ("+", "Zoom in: fit → 100 % → 200 % (drag or Shift+arrows to look around)"),
        ("-", "Zoom out"),
        ("0", "Fit the image to the screen again"),
    )
    return keys + [{"key": key, "what": what} for key, what in zoom_keys if key not in taken]
