"""The objects protocol's question kinds: ``boxes`` (confirm or reject each detector box the item
carries, ``metadata["boxes"]`` from ``prepare_box_check``) and ``classes`` (COCO class names
missed by the detector). Registered by the app (``ObjectsConfig.question_kinds``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from annotate.views.screen import choice_rows
from metrics.coco_names import COCO_CLASS_NAMES, UnknownClassName, normalise_class_name
from studies.kinds import AnswerInvalid, ItemLike, QuestionKind, QuestionLike

# The box check puts the detector's boxes in the item's metadata under this key:
# [{"class", "confidence", "box": [x0, y0, x1, y1]}] in pixels.
BOXES_KEY = "boxes"
# More boxes than this in one posted form is not a box check but a malformed request.
MAX_POSTED_BOXES = 1000


def item_boxes(item: ItemLike | None) -> list[dict[str, Any]] | None:
    """The detector boxes the item carries for people to check (``metadata["boxes"]``), or None
    when it carries none (its box question is then answered as plain text)."""
    if item is None:
        return None
    boxes = (item.metadata or {}).get(BOXES_KEY)
    return boxes if isinstance(boxes, list) else None


def _box_rows(
    question: QuestionLike, boxes: list[dict[str, Any]], chosen: str, field: str
) -> list[dict[str, Any]]:
    """One row per box: its number, class, confidence, radio field and the answer to show (the
    posted or stored answer at its position, none by default: a preselected answer would be
    confirmed without a look)."""
    given = chosen.split(",") if chosen else []
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
                "choices": choice_rows(question, answer),
            }
        )
    return rows


class BoxesKind(QuestionKind):
    """A yes/no per detector box, in box order; stored as "yes,no,…". Without boxes on the item
    (none prepared), a text field of such a list."""

    name = "boxes"
    label = "Confirm or reject each detector box (value: one choice per box, comma-separated)"
    template = "objects/kinds/boxes.html"
    script = "objects/boxes.js"
    stylesheet = "objects/boxes.css"
    empty_allowed = True
    reads_item = True
    text_answer = True

    def validate(self, question: QuestionLike, value: str, item: ItemLike | None = None) -> str:
        parts = [part.strip() for part in value.split(",")] if value else []
        bad = [part for part in parts if question.choice(part) is None]
        if bad:
            raise AnswerInvalid(
                f"“{bad[0]}” is not an answer to “{question.key}”. Valid answers per box: "
                f"{', '.join(question.values)}."
            )
        boxes = item_boxes(item)
        if item is not None and boxes is not None and len(parts) != len(boxes):
            raise AnswerInvalid(
                f"The answer to “{question.key}” has {len(parts)} value(s) for the {len(boxes)} "
                f"box(es) of item {item.key}: answer each box once, in order."
            )
        return ",".join(parts)

    def posted(self, question: QuestionLike, post: Mapping[str, Any], field: str) -> tuple[str | None, str]:
        """The per-box radios (``<field>_<i>``, ``<field>_n`` boxes) joined into "yes,no,…" in box
        order; an error when a box has no answer. A form that posts ``field`` itself (a script,
        the plain text field) is read as it is."""
        raw_n = post.get(f"{field}_n")
        if raw_n is None or field in post:
            return None, ""
        try:
            n = int(raw_n)
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_POSTED_BOXES:
            return None, f"The form sent an impossible number of boxes ({raw_n[:20]!r}); reload the page."
        parts = [post.get(f"{field}_{index}", "").strip() for index in range(n)]
        unanswered = [index + 1 for index, part in enumerate(parts) if not part]
        error = ""
        if unanswered:
            keys = " or ".join(str(c.get("key", c["value"])).upper() for c in question.choices)
            error = (
                f"Box {unanswered[0]} has no answer yet ({len(unanswered)} of {n} unanswered): "
                f"press {keys} for each box."
            )
        return ",".join(parts), error

    def context(
        self, question: QuestionLike, chosen: str, field: str, item: ItemLike | None
    ) -> dict[str, Any]:
        boxes = item_boxes(item)
        return {
            "box_check": boxes is not None,
            "boxes": _box_rows(question, boxes, chosen, field) if boxes is not None else [],
        }

    def overlay(self, question: QuestionLike, item: ItemLike, image: Any) -> dict[str, Any] | None:
        boxes = item_boxes(item)
        drawn = boxes_overlay(image, boxes) if boxes is not None else None
        return {**drawn, "template": "objects/kinds/boxes_overlay.html"} if drawn else None

    def keys(self, question: QuestionLike, *, alone: bool) -> list[dict[str, str]]:
        keys = [
            {"key": c["key"], "what": f"The highlighted box: {c.get('name', c['value'])}; on to the next box"}
            for c in question.choices
            if c.get("key")
        ]
        return [*keys, {"key": "← →", "what": "Highlight the previous / next box"}]


class ClassesKind(QuestionKind):
    """A free list of COCO class names (may be empty), each stored in ultralytics' spelling
    (``metrics.coco_names``; an unknown name is refused with close matches)."""

    name = "classes"
    label = "Free list of class names (value: comma-separated names)"
    template = "objects/kinds/classes.html"
    script = "objects/boxes.js"
    needs_choices = False
    empty_allowed = True
    text_answer = True

    def validate(self, question: QuestionLike, value: str, item: ItemLike | None = None) -> str:
        try:
            return ",".join(normalise_class_name(p.strip()) for p in value.split(",") if p.strip())
        except UnknownClassName as exc:
            raise AnswerInvalid(f"In the answer to “{question.key}”: {exc}.") from None

    def context(
        self, question: QuestionLike, chosen: str, field: str, item: ItemLike | None
    ) -> dict[str, Any]:
        return {"class_names": COCO_CLASS_NAMES}

    def keys(self, question: QuestionLike, *, alone: bool) -> list[dict[str, str]]:
        return [{"key": "/", "what": f"Type in “{question.text}” (Esc leaves the field)"}]


BOXES = BoxesKind()
CLASSES = ClassesKind()


# A caption ("3 dining table", bold) in font sizes: CAPTION_EM wide per character, its ink CAPTION_ASCENT
# above the baseline and CAPTION_DESCENT below; placed at the phone's size (boxes.css) so none overlap.
CAPTION_EM = 0.65
CAPTION_ASCENT = 0.95
CAPTION_DESCENT = 0.3
PHONE_CAPTION_SCALE = 1.6
# Past this many boxes captions go above their boxes (placing them apart costs boxes squared).
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


def boxes_overlay(image: Any, boxes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The boxes drawn over the image, in its pixel coordinates (an SVG whose viewBox is the
    image's size scales with it), captions sized to the image and placed apart; None without
    an image."""
    if image is None:
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
