"""The object classes: ultralytics' 80 COCO names (as data) and the other spellings papers use."""

from __future__ import annotations

import difflib
import re

#: Ultralytics' COCO class names, in its index order (class id ``i`` is ``COCO_CLASS_NAMES[i]``).
_COCO_ROWS = (
    "person, bicycle, car, motorcycle, airplane, bus, train, truck, boat, traffic light",
    "fire hydrant, stop sign, parking meter, bench, bird, cat, dog, horse, sheep, cow, elephant",
    "bear, zebra, giraffe, backpack, umbrella, handbag, tie, suitcase, frisbee, skis, snowboard",
    "sports ball, kite, baseball bat, baseball glove, skateboard, surfboard, tennis racket",
    "bottle, wine glass, cup, fork, knife, spoon, bowl, banana, apple, sandwich, orange, broccoli",
    "carrot, hot dog, pizza, donut, cake, chair, couch, potted plant, bed, dining table, toilet",
    "tv, laptop, mouse, remote, keyboard, cell phone, microwave, oven, toaster, sink",
    "refrigerator, book, clock, vase, scissors, teddy bear, hair drier, toothbrush",
)
COCO_CLASS_NAMES: tuple[str, ...] = tuple(name for row in _COCO_ROWS for name in row.split(", "))

#: Other spellings of a class (darknet/Pascal VOC, spaced, American) → its ultralytics name.
#: Keys are already in normalised form (lower case, single spaces).
CLASS_NAME_ALIASES: dict[str, str] = {
    "motorbike": "motorcycle",
    "aeroplane": "airplane",
    "sofa": "couch",
    "pottedplant": "potted plant",
    "diningtable": "dining table",
    "tvmonitor": "tv",
    "tv monitor": "tv",
    "hair dryer": "hair drier",
}

_INDEX: dict[str, int] = {name: i for i, name in enumerate(COCO_CLASS_NAMES)}
# No two names collide once their spaces are removed, so glued words ("cellphone") mean one class.
_SPACELESS: dict[str, str] = {name.replace(" ", ""): name for name in COCO_CLASS_NAMES}
_SEPARATORS = re.compile(r"[\s_\-]+")


class UnknownClassName(ValueError):
    """A class name outside the 80 COCO classes, with the closest names as ``suggestions``."""

    def __init__(self, name: str, suggestions: tuple[str, ...]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown object class {name!r}{hint} (the vocabulary is ultralytics' 80 COCO class names)"
        )


def _normalise_spelling(name: str) -> str:
    """Case, underscores, hyphens and repeated spaces do not make a different class."""
    return _SEPARATORS.sub(" ", name).strip().casefold()


def normalise_class_name(name: str) -> str:
    """The ultralytics COCO name for ``name`` in any accepted spelling; ``UnknownClassName`` otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"an object class name must be a string, not {type(name).__name__}")
    key = _normalise_spelling(name)
    if key in _INDEX:
        return key
    if key in CLASS_NAME_ALIASES:
        return CLASS_NAME_ALIASES[key]
    spaceless = key.replace(" ", "")
    if spaceless in _SPACELESS:
        return _SPACELESS[spaceless]
    raise UnknownClassName(name, _suggestions(key))


def _suggestions(key: str) -> tuple[str, ...]:
    """Up to three COCO names whose spelling (or an alias's) is close to ``key``."""
    candidates = {name: name for name in COCO_CLASS_NAMES} | CLASS_NAME_ALIASES
    close = difflib.get_close_matches(key, list(candidates), n=5, cutoff=0.6)
    return tuple(dict.fromkeys(candidates[match] for match in close))[:3]


def coco_class_index(name: str) -> int:
    """The ultralytics class id (0-79) of ``name`` in any accepted spelling."""
    return _INDEX[normalise_class_name(name)]
