"""What the labeling screen draws: the questions with their choices, the detector boxes to check
with their captions placed apart, and the keys of the guidelines box."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from annotate.forms import answer_field, reason_field
from annotate.views.common import TEXT_KINDS
from metrics.coco_names import COCO_CLASS_NAMES
from studies.models import Item, ItemImage, Question, QuestionKind, Study
from studies.selectors import study_questions

# The box check (``detectors`` command ``prepare_box_check``) puts the detector's boxes in the
# item's metadata under this key: [{"class", "confidence", "box": [x0, y0, x1, y1]}] in pixels.
BOXES_KEY = "boxes"


def choice_rows(question: Question, chosen: str = "") -> list[dict[str, Any]]:
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


def item_boxes(item: Item | None) -> list[dict[str, Any]] | None:
    """The detector boxes the item carries for people to check (``metadata["boxes"]``), or None
    when it carries none (its box question is then answered as plain text)."""
    if item is None:
        return None
    boxes = (item.metadata or {}).get(BOXES_KEY)
    return boxes if isinstance(boxes, list) else None


def _box_rows(question: Question, boxes: list[dict[str, Any]], chosen: str) -> list[dict[str, Any]]:
    """One row per box: its number, class, confidence, radio field and the answer to show (the
    posted or stored answer at its position, none by default: a preselected answer would be
    confirmed without a look)."""
    given = chosen.split(",") if chosen else []
    field = answer_field(question.key)
    rows = []
    for index, box in enumerate(boxes):
        answer = given[index].strip() if index < len(given) else ""
        rows.append(
            {
                "index": index,
                "number": index + 1,
                "class": str(box.get("class", "")),
                "confidence": box.get("confidence"),
                "field": f"{field}_{index}",
                "answer": answer,
                "choices": choice_rows(question, answer),
            }
        )
    return rows


def question_rows(
    questions: Iterable[Question],
    answers: Mapping[str, str],
    reasons: Mapping[str, str],
    boxes: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The questions as the labeling screen draws them, with the answers to show selected: the
    annotator's (current or just posted), else the question's default. With the item's
    ``boxes``, a box question is a yes/no per box and a class question suggests COCO names."""
    rows = []
    for question in questions:
        chosen = answers.get(question.key, question.default_value)
        choices = choice_rows(question, chosen)
        box_check = question.kind == QuestionKind.BOXES and boxes is not None
        rows.append(
            {
                "key": question.key,
                "text": question.text,
                "kind": question.kind,
                "hotkey": question.hotkey.lower(),
                "field": answer_field(question.key),
                "reason_field": reason_field(question.key),
                "choices": choices,
                "value": chosen,
                "display": question.display(chosen) if chosen else "",
                "reason": reasons.get(question.key, ""),
                "is_text": question.kind in TEXT_KINDS and not box_check,
                "needs_reason": [c["name"] for c in choices if c["requires_reason"]],
                "box_check": box_check,
                "boxes": _box_rows(question, boxes, chosen) if box_check and boxes is not None else [],
                "class_names": COCO_CLASS_NAMES if question.kind == QuestionKind.CLASSES else (),
            }
        )
    return rows


# How the box captions are laid out: a caption is its number and class in bold ("3 dining
# table"), about CAPTION_EM font sizes wide per character, its ink CAPTION_ASCENT above the
# baseline and CAPTION_DESCENT below; on a phone (boxes.css) it is PHONE_CAPTION_SCALE times
# larger. Captions are placed at the phone's size, so no two overlap there, nor at the smaller
# size of a wider screen (a caption grows from its baseline's left end).
CAPTION_EM = 0.65
CAPTION_ASCENT = 0.95
CAPTION_DESCENT = 0.3
PHONE_CAPTION_SCALE = 1.6
# Past this many boxes (a crowd) captions simply go above their boxes: placing each apart from
# all the others costs boxes squared times the places tried, on every key press's render.
CAPTIONS_PLACED_APART = 50


def _caption_ys(y0: float, y1: float, ascent: float, descent: float, height: int) -> list[float]:
    """Baselines to try for the caption of a box from ``y0`` to ``y1``, best first: above the
    box, inside its top, below it, inside its bottom — then every line of the image from the top."""
    gap = descent * 0.3
    tried = [y0 - descent - gap, y0 + ascent + gap, y1 + ascent + gap, y1 - descent - gap]
    step = (ascent + descent) / 2
    tried += [ascent + n * step for n in range(int(max(0.0, height - ascent - descent) / step) + 1)]
    return tried


def _captions_place(
    boxes: list[tuple[float, float, float, float, str]], *, width: int, height: int, font: int
) -> list[tuple[float, float]]:
    """The (x, baseline y) of each box's caption, in the image's pixels: on the image, and no two
    overlapping at the phone's caption size; a caption that finds no free place (or comes after
    the first ``CAPTIONS_PLACED_APART``) goes above its box."""
    scale = font * PHONE_CAPTION_SCALE
    ascent, descent = CAPTION_ASCENT * scale, CAPTION_DESCENT * scale
    placed: list[tuple[float, float, float, float]] = []
    positions = []
    for n, (x0, y0, _x1, y1, text) in enumerate(boxes):
        wide = len(text) * CAPTION_EM * scale
        x = min(max(0.0, x0), max(0.0, width - wide))
        ys = _caption_ys(y0, y1, ascent, descent, height) if n < CAPTIONS_PLACED_APART else [y0 - descent]
        chosen = None
        for y in ys:
            rect = (x, y - ascent, x + wide, y + descent)
            on_image = rect[1] >= 0 and rect[3] <= height
            free = all(
                rect[2] <= r[0] or r[2] <= rect[0] or rect[3] <= r[1] or r[3] <= rect[1] for r in placed
            )
            if on_image and free:
                chosen = y
                break
        y = chosen if chosen is not None else max(ascent, ys[0])
        placed.append((x, y - ascent, x + wide, y + descent))
        positions.append((round(x, 2), round(y, 2)))
    return positions


def overlay(item: Item, image: ItemImage | None, boxes: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The boxes drawn over the image, in its pixel coordinates (an SVG whose viewBox is the
    image's size scales with it), captions sized to the image and placed apart; None without
    boxes."""
    if image is None or boxes is None:
        return None
    width, height = image.image.width, image.image.height
    font = max(1, round(max(width, height) / 30))
    shapes: list[dict[str, Any]] = []
    for index, box in enumerate(boxes):
        try:
            x0, y0, x1, y1 = (float(v) for v in box["box"])
        except (KeyError, TypeError, ValueError):
            continue  # not drawable; its row still asks about it
        shapes.append(
            {
                "index": index,
                "number": index + 1,
                "class": str(box.get("class", "")),
                "x": round(x0, 2),
                "y": round(y0, 2),
                "width": round(x1 - x0, 2),
                "height": round(y1 - y0, 2),
            }
        )
    captions = _captions_place(
        [
            (s["x"], s["y"], s["x"] + s["width"], s["y"] + s["height"], f"{s['number']} {s['class']}")
            for s in shapes
        ],
        width=width,
        height=height,
        font=font,
    )
    for shape, (label_x, label_y) in zip(shapes, captions, strict=True):
        shape["label_x"], shape["label_y"] = label_x, label_y
    return {"width": width, "height": height, "font": font, "boxes": shapes}


def study_keys(study: Study) -> list[dict[str, Any]]:
    """Every key of the study's labeling screen, for the guidelines box."""
    questions = study_questions(study)
    keys: list[dict[str, Any]] = []
    single = len(questions) == 1 and questions[0].kind == QuestionKind.CHOICE
    for question in questions:
        if question.kind == QuestionKind.TOGGLE and question.hotkey:
            names = " / ".join(c.get("name", c["value"]) for c in question.choices)
            keys.append({"key": question.hotkey, "what": f"{question.text} ({names}; switches)"})
        elif question.kind == QuestionKind.BOXES:
            for choice in question.choices:
                if choice.get("key"):
                    what = choice.get("name", choice["value"])
                    keys.append(
                        {"key": choice["key"], "what": f"The highlighted box: {what}; on to the next box"}
                    )
            keys.append({"key": "← →", "what": "Highlight the previous / next box"})
        elif question.kind == QuestionKind.CLASSES:
            keys.append({"key": "/", "what": f"Type in “{question.text}” (Esc leaves the field)"})
        elif question.kind == QuestionKind.CHOICE:
            for choice in question.choices:
                if choice.get("key"):
                    what = choice.get("name", choice["value"])
                    if choice.get("requires_reason"):
                        what += " (asks for a reason)"
                    keys.append({"key": choice["key"], "what": what if single else f"{question.key}: {what}"})
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
    for key, what in zoom_keys:
        if key not in taken:
            keys.append({"key": key, "what": what})
    return keys
