"""The kinds of output a detector may declare, and one validator per kind. No models: the built-in validators
are plain functions; a protocol's kinds are read from ``studies.protocols``."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from metrics.coco_names import UnknownClassName, normalise_class_name
from studies.jsonbounds import JSONOutOfBounds, json_bounds_check
from studies.protocols import PROTOCOLS, protocols_changed

# The output kinds of the detectors built in here (their plugins declare them; a protocol's spec
# names the kinds it reads, ``ProtocolSpec.output_kinds``). A protocol's own kind is its own.
KIND_GENDER = "gender"
KIND_ATTRIBUTES = "attributes"
KIND_MEASUREMENTS = "measurements"
KIND_OBJECTS = "objects"

GENDER_LABELS = ("male", "female", "filtered")
#: Why a gender detector set an image aside, with the label pages show.
FILTER_REASON_LABELS = {
    "no_face": "No face",
    "no_person": "No person",
    "several_people": "Several people",
    "low_confidence": "Low confidence",
    "uncertain": "Uncertain answer",
    "not_a_person": "Not a person",
    "unparseable": "Answer not understood",
    "api_error": "API error",
    "other": "Other",
}
FILTER_REASONS = tuple(FILTER_REASON_LABELS)
MEASURED_GENDERS = ("male", "female")
AGE_RANGE = (0.0, 120.0)
SKIN_GRAY_RANGE = (0.0, 255.0)
CONFIDENCE_RANGE = (0.0, 1.0)
MEASUREMENT_FIELDS = ("face", "age", "gender", "skin_gray")


class OutputInvalid(ValueError):
    """An output does not fit its kind's schema. ``field`` is the path of the bad field
    (``label``, ``scores.male``, ``objects[2].box``), ``problem`` what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise OutputInvalid(path, f"must be a JSON object, got {_type_name(value)}")
    return value


def _no_unknown_fields(value: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    unknown = sorted(str(key) for key in value if key not in allowed)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise OutputInvalid(where, f"unknown field (allowed: {', '.join(allowed)})")


def _number(value: Any, path: str, bounds: tuple[float, float] | None = None) -> float:
    """A finite JSON number (not a boolean) as a float, within ``bounds`` when given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OutputInvalid(path, f"must be a number, got {_type_name(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise OutputInvalid(path, f"must be a finite number, got {value!r}")
    if bounds is not None and not bounds[0] <= number <= bounds[1]:
        raise OutputInvalid(path, f"must be between {bounds[0]:g} and {bounds[1]:g}, got {value!r}")
    return number


def _scores(value: Any, path: str) -> dict[str, float]:
    scores = _object(value, path)
    cleaned: dict[str, float] = {}
    for key, score in scores.items():
        if not isinstance(key, str) or not key:
            raise OutputInvalid(path, f"keys must be non-empty strings, got {key!r}")
        cleaned[key] = _number(score, f"{path}.{key}")
    return cleaned


def validate_gender(output: Any) -> dict[str, Any]:
    """A gender verdict → ``{label, reason, scores[, detail]}``; ``reason``/``scores`` default
    to empty. Raises OutputInvalid."""
    output = _object(output, "output")
    _no_unknown_fields(output, ("label", "reason", "scores", "detail"), "")
    if "label" not in output:
        raise OutputInvalid("label", "missing (male, female or filtered)")
    label = output["label"]
    if label not in GENDER_LABELS:
        raise OutputInvalid("label", f"must be male, female or filtered, got {label!r}")
    reason = output.get("reason", "")
    if not isinstance(reason, str):
        raise OutputInvalid("reason", f"must be a string, got {_type_name(reason)}")
    if label == "filtered":
        if not reason:
            raise OutputInvalid("reason", f"a filtered verdict needs one of {', '.join(FILTER_REASONS)}")
        if reason not in FILTER_REASONS:
            raise OutputInvalid("reason", f"must be one of {', '.join(FILTER_REASONS)}, got {reason!r}")
    elif reason:
        raise OutputInvalid("reason", f"only a filtered verdict has a reason, got {reason!r} for {label}")
    cleaned: dict[str, Any] = {
        "label": label,
        "reason": reason,
        "scores": _scores(output.get("scores", {}), "scores"),
    }
    detail = output.get("detail", "")
    if not isinstance(detail, str):
        raise OutputInvalid("detail", f"must be a string, got {_type_name(detail)}")
    if detail:
        cleaned["detail"] = detail
    return cleaned


def json_value(value: Any, path: str) -> Any:
    """A copy of a JSON value (finite numbers, string keys), or OutputInvalid naming ``path``."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return _number(value, path) if isinstance(value, float) else value
    if isinstance(value, list | tuple):
        return [json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise OutputInvalid(path, "keys must be strings")
        return {key: json_value(v, f"{path}.{key}") for key, v in value.items()}
    raise OutputInvalid(path, f"must be a JSON value, got {_type_name(value)}")


# --- reading the answers kind (both shapes) -------------------------------------------------------
def answers_extended(output: Any) -> bool:
    """True when an answers output has the extended shape ``{"answers": {…}, …}``; the plain
    ``{q: value}`` has only string values, so a question named ``answers`` cannot be mistaken."""
    return isinstance(output, Mapping) and isinstance(output.get("answers"), Mapping)


def answers_of(output: Any) -> dict[str, str]:
    """``{question: answer value}`` of an answers output, either shape ({} for anything else)."""
    if not isinstance(output, Mapping):
        return {}
    answers = output["answers"] if answers_extended(output) else output
    return {str(k): str(v) for k, v in answers.items() if isinstance(v, str)}


def probabilities_of(output: Any) -> dict[str, dict[str, float]]:
    """``{question: {answer value: p}}`` of an answers output ({} when it has none: a plain or
    imported output without probabilities). p sums to 1 over the question's choices; a choice
    left out has p = 0."""
    if not answers_extended(output):
        return {}
    return {
        str(q): {str(v): float(p) for v, p in by_value.items()}
        for q, by_value in (output.get("probabilities") or {}).items()
    }


def filtered_of(output: Any) -> dict[str, str]:
    """``{question: reason}``: the questions a judge was asked and gave no answer to (e.g. an
    unparseable reply), each with one of ``FILTER_REASONS``."""
    if not answers_extended(output):
        return {}
    return {str(q): str(reason) for q, reason in (output.get("filtered") or {}).items()}


def validate_attributes(output: Any) -> dict[str, Any]:
    """A score per attribute question → ``{scores: {question key: float}[, meta: {…}]}``."""
    output = _object(output, "output")
    _no_unknown_fields(output, ("scores", "meta"), "")
    if "scores" not in output:
        raise OutputInvalid("scores", "missing (an object {question key: score})")
    cleaned: dict[str, Any] = {"scores": _scores(output["scores"], "scores")}
    meta = json_value(_object(output.get("meta", {}), "meta"), "meta")
    if meta:
        cleaned["meta"] = meta
    return cleaned


def validate_measurements(output: Any) -> dict[str, Any]:
    """``{face, age, gender, skin_gray}``, each present and possibly null, plus the optional
    ``n_faces`` (an integer ≥ 0) and ``overlay`` (a storage name under MEDIA_ROOT, or "")."""
    output = _object(output, "output")
    _no_unknown_fields(output, (*MEASUREMENT_FIELDS, "n_faces", "overlay"), "")
    missing = [name for name in MEASUREMENT_FIELDS if name not in output]
    if missing:
        raise OutputInvalid(missing[0], "missing (null when it cannot be measured)")
    face, age, gender, skin = (output[name] for name in MEASUREMENT_FIELDS)
    if face is not None and not isinstance(face, bool):
        raise OutputInvalid("face", f"must be true, false or null, got {_type_name(face)}")
    if gender is not None and gender not in MEASURED_GENDERS:
        raise OutputInvalid("gender", f"must be male, female or null, got {gender!r}")
    cleaned: dict[str, Any] = {
        "face": face,
        "age": None if age is None else _number(age, "age", AGE_RANGE),
        "gender": gender,
        "skin_gray": None if skin is None else _number(skin, "skin_gray", SKIN_GRAY_RANGE),
    }
    if "n_faces" in output:
        n_faces = output["n_faces"]
        if isinstance(n_faces, bool) or not isinstance(n_faces, int) or n_faces < 0:
            raise OutputInvalid("n_faces", f"must be an integer ≥ 0, got {n_faces!r}")
        cleaned["n_faces"] = n_faces
    if "overlay" in output:
        overlay = output["overlay"]
        # A storage name a view may serve: never absolute, never climbing out of MEDIA_ROOT.
        if not isinstance(overlay, str) or not overlay or overlay.startswith(("/", "\\")):
            raise OutputInvalid("overlay", f"must be a relative storage name, got {overlay!r}")
        if ".." in overlay.replace("\\", "/").split("/"):
            raise OutputInvalid("overlay", f"must not contain '..', got {overlay!r}")
        cleaned["overlay"] = overlay
    return cleaned


def _box(value: Any, path: str) -> list[float]:
    if not isinstance(value, list | tuple) or len(value) != 4:
        got = f"{len(value)} values" if isinstance(value, list | tuple) else _type_name(value)
        raise OutputInvalid(path, f"must be a list [x0, y0, x1, y1], got {got}")
    x0, y0, x1, y1 = (_number(v, f"{path}[{i}]") for i, v in enumerate(value))
    if x1 <= x0:
        raise OutputInvalid(path, "x1 must be greater than x0")
    if y1 <= y0:
        raise OutputInvalid(path, "y1 must be greater than y0")
    return [x0, y0, x1, y1]


def validate_objects(output: Any) -> dict[str, Any]:
    """``{objects: [{class, confidence, box}]}`` (the list may be empty). Raises OutputInvalid."""
    output = _object(output, "output")
    _no_unknown_fields(output, ("objects",), "")
    if "objects" not in output:
        raise OutputInvalid("objects", "missing (a list, empty when nothing was found)")
    if not isinstance(output["objects"], list):
        raise OutputInvalid("objects", f"must be a list, got {_type_name(output['objects'])}")
    cleaned = []
    for n, instance in enumerate(output["objects"]):
        path = f"objects[{n}]"
        instance = _object(instance, path)
        _no_unknown_fields(instance, ("class", "confidence", "box"), path)
        for name in ("class", "confidence", "box"):
            if name not in instance:
                raise OutputInvalid(f"{path}.{name}", "missing")
        name = instance["class"]
        if not isinstance(name, str) or not name.strip():
            raise OutputInvalid(f"{path}.class", f"must be a non-empty string, got {name!r}")
        cleaned.append(
            {
                "class": name,
                "confidence": _number(instance["confidence"], f"{path}.confidence", CONFIDENCE_RANGE),
                "box": _box(instance["box"], f"{path}.box"),
            }
        )
    # Darknet names become ultralytics' COCO names; after the loop, so that a malformed box is
    # reported before the class of the same instance.
    for n, instance in enumerate(cleaned):
        try:
            instance["class"] = normalise_class_name(str(instance["class"]))
        except UnknownClassName as exc:
            raise OutputInvalid(f"objects[{n}].class", str(exc)) from None
    return {"objects": cleaned}


#: How far (pixels) a box may reach past the image's edge and still count as inside it: a
#: detector that resizes the image and scales boxes back can land a fraction of a pixel out.
BOX_SLACK_PX = 1.0


def objects_inside_image(output: Mapping[str, Any], width: int, height: int) -> None:
    """Raise OutputInvalid naming the first box of a (validated) objects output that lies outside a ``width``
    x ``height`` image (a box outside the image is a per-row error)."""
    for n, instance in enumerate(output.get("objects", [])):
        x0, y0, x1, y1 = instance["box"]
        if min(x0, y0) < -BOX_SLACK_PX or x1 > width + BOX_SLACK_PX or y1 > height + BOX_SLACK_PX:
            raise OutputInvalid(
                f"objects[{n}].box",
                f"[{x0:g}, {y0:g}, {x1:g}, {y1:g}] lies outside the {width}x{height} image",
            )


Validator = Callable[[Any], dict[str, Any]]
#: The kinds of the detectors built in here (below every protocol).
_BUILT_IN: Mapping[str, Validator] = MappingProxyType(
    {
        KIND_GENDER: validate_gender,
        KIND_ATTRIBUTES: validate_attributes,
        KIND_MEASUREMENTS: validate_measurements,
        KIND_OBJECTS: validate_objects,
    }
)


@cache
def _protocol_kinds() -> tuple[dict[str, str], dict[str, str]]:
    """The kinds the registered protocols define."""
    validators: dict[str, str] = {}
    checks: dict[str, str] = {}
    owner: dict[str, str] = {}
    for key, spec in PROTOCOLS.items():
        for kind, path in spec.kind_validators.items():
            if kind in _BUILT_IN or kind in owner:
                raise ValueError(
                    f"output kind {kind!r} of protocol {key!r} is defined by {owner.get(kind, 'detectors.kinds')}"
                )
            owner[kind] = key
            validators[kind] = path
        checks.update(spec.kind_checks)
    return validators, checks


def _protocols_changed(**kwargs: Any) -> None:
    _protocol_kinds.cache_clear()


protocols_changed.connect(_protocols_changed, dispatch_uid="detectors.kinds.protocols_changed")


class _Registered(Mapping[str, Any]):
    """``built_in``, then one of ``_protocol_kinds()``'s mappings (its dotted paths imported when
    read). A built-in kind never reads the protocols: a Ray worker has no Django to read them from."""

    def __init__(self, built_in: Mapping[str, Any], part: int) -> None:
        self.built_in = built_in
        self.part = part

    def __getitem__(self, kind: str) -> Any:
        if kind in self.built_in:
            return self.built_in[kind]
        return import_string(_protocol_kinds()[self.part][kind])

    def __contains__(self, kind: object) -> bool:
        return kind in self.built_in or kind in _protocol_kinds()[self.part]

    def __iter__(self) -> Iterator[str]:
        return iter([*self.built_in, *_protocol_kinds()[self.part]])

    def __len__(self) -> int:
        return len(self.built_in) + len(_protocol_kinds()[self.part])

    def __repr__(self) -> str:
        return repr(tuple(self))


#: Kind -> validator: the built-in kinds, then the protocols'.
VALIDATORS: Mapping[str, Validator] = _Registered(_BUILT_IN, 0)
#: Kind -> its check against a study's questions (kinds that name questions).
STUDY_CHECKS: Mapping[str, Callable[..., None]] = _Registered({}, 1)
#: Every kind, in order (built-in first).
KINDS: Collection[str] = VALIDATORS


def validatable_here(kind: str) -> bool:
    """Whether this process can validate ``kind``: a built-in kind always, a protocol's kind only where
    Django's app registry is loaded."""
    return kind in _BUILT_IN or apps.ready


def kind_choices() -> list[tuple[str, str]]:
    """``Prediction.kind``'s choices: every kind (a callable, so a protocol's new kind needs no
    migration)."""
    return [(kind, kind) for kind in KINDS]


def output_fits_questions(
    kind: str, output: Mapping[str, Any], questions: Mapping[str, Sequence[str]]
) -> None:
    """Raise OutputInvalid when a validated ``output`` of ``kind`` names a question or answer
    that ``questions`` (``{question key: [answer values]}``, the study's) lacks; kinds that
    name no question always fit."""
    if kind in STUDY_CHECKS:
        STUDY_CHECKS[kind](output, questions)


def output_validate(kind: str, output: Any) -> dict[str, Any]:
    """``output`` checked against ``kind``'s schema; returns the normalised copy to store. Raises
    OutputInvalid naming the field (``kind`` itself when the kind is unknown)."""
    try:
        validator = VALIDATORS[kind]
    except (KeyError, TypeError):
        raise OutputInvalid("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}") from None
    normalised = validator(output)
    try:
        # What any JSON column takes (a detail with a NUL character breaks a PostgreSQL write).
        json_bounds_check(normalised, field="output")
    except JSONOutOfBounds as exc:
        raise OutputInvalid(exc.field.removeprefix("output.") or "output", exc.problem) from None
    return normalised
