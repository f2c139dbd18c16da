"""The one contract every detector (filter, classifier or measurer) implements."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.kinds import KIND_GENDER, KINDS, json_value, output_validate, validatable_here

if TYPE_CHECKING:  # Pillow is light, but keep the import graph obvious.
    from PIL.Image import Image as PILImage

MALE = "male"
FEMALE = "female"
FILTERED = "filtered"
VERDICTS = (MALE, FEMALE, FILTERED)


#: The paper's rule for "several people" (section 5.1): the second-largest box covers more than
#: half the largest one's area; the default of every detector that picks one main person or face.
SEVERAL_PEOPLE_RATIO = 0.5


def second_largest_ratio(areas: Sequence[float]) -> float:
    """Area of the second-largest box over the largest's; 0.0 with fewer than two boxes."""
    ordered = sorted((a for a in areas if a > 0), reverse=True)
    if len(ordered) < 2:
        return 0.0
    return ordered[1] / ordered[0]


@dataclass(frozen=True)
class FaceDecision:
    """What the face layout says before any classification: a main face, or a filter reason."""

    main: Any
    reason: str
    scores: dict[str, float]


def face_decision(faces: Sequence[Any], *, several_ratio: float = SEVERAL_PEOPLE_RATIO) -> FaceDecision:
    """The main (largest) face of an image, or why there is none: no face, or several people
    (rules: docs/reference/detector-rules.md). ``faces`` have an ``area`` (and a ``confidence``,
    scored as ``face_confidence`` when they do)."""
    if not faces:
        return FaceDecision(None, "no_face", {"n_faces": 0.0})
    ranked = sorted(faces, key=lambda f: f.area, reverse=True)
    main = ranked[0]
    ratio = second_largest_ratio([item.area for item in ranked])
    scores = {"n_faces": float(len(ranked)), "second_face_ratio": round(ratio, 4)}
    if hasattr(main, "confidence"):
        scores["face_confidence"] = round(float(main.confidence), 4)
    if ratio > several_ratio:
        return FaceDecision(None, "several_people", scores)
    return FaceDecision(main, "", scores)


class DetectorError(Exception):
    """Base class of what detectors raise."""


class DetectorUnavailable(DetectorError):
    """The detector cannot run here: weights missing, package missing, API key not set. The message names the
    setting or environment variable to fill. Raised from ``load()`` (or the constructor), never per image."""


class UnknownDetector(DetectorError):
    """No detector is registered under that name."""


class DetectorOptionError(DetectorError, ValueError):
    """An option the detector does not take, or a value it cannot use. Raised by the constructor."""


@dataclass(frozen=True)
class DetectorOutput:
    """What a detector says about one image: a gender verdict, or the output of another kind."""

    verdict: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    filter_reason: str = ""
    detail: str = ""  # free text kept with the verdict, e.g. BLIP-2's raw answer
    kind: str = KIND_GENDER
    data: Mapping[str, Any] = field(default_factory=dict)  # the output of a kind other than gender
    _output: dict[str, Any] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        here = validatable_here(self.kind)
        if here and self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == KIND_GENDER:
            if self.data:
                raise ValueError("a gender output has no data: give verdict, scores, filter_reason")
            if self.verdict not in VERDICTS:
                raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
            if self.verdict == FILTERED and not self.filter_reason:
                raise ValueError("a filtered verdict needs a filter_reason")
            if self.verdict != FILTERED and self.filter_reason:
                raise ValueError("only a filtered verdict has a filter_reason")
            raw: Any = {
                "label": self.verdict,
                "reason": self.filter_reason,
                "scores": dict(self.scores),
                "detail": self.detail,
            }
        else:
            if self.verdict or self.scores or self.filter_reason or self.detail:
                raise ValueError(
                    f"a {self.kind} output carries everything in data (verdict, scores, "
                    "filter_reason and detail are for gender outputs)"
                )
            raw = self.data
        # OutputInvalid names the field ("scores.male: must be a number"). Where Django is not loaded
        # (a Ray worker) a protocol's kind is checked as JSON here and validated by the driver.
        checked = output_validate(self.kind, raw) if here else json_value(raw, "output")
        object.__setattr__(self, "_output", checked)

    @classmethod
    def filtered(
        cls, reason: str, scores: dict[str, float] | None = None, detail: str = ""
    ) -> DetectorOutput:
        return cls(verdict=FILTERED, scores=dict(scores or {}), filter_reason=reason, detail=detail)

    @classmethod
    def of(cls, kind: str, data: Mapping[str, Any]) -> DetectorOutput:
        """The output of a kind other than gender, e.g. ``of("measurements", {"face": True, …})``."""
        return cls(kind=kind, data=dict(data))

    def as_output(self) -> dict[str, Any]:
        """The JSON object stored in ``Prediction.output``, valid for ``kind`` (a fresh copy). Gender:
        ``{"label", "reason", "scores"}`` plus ``"detail"`` when there is one."""
        return copy.deepcopy(self._output)


class Detector:
    """Subclass this, set ``key``, ``version`` (and ``output_kind`` if not gender), implement ``load`` and
    ``predict``."""

    key: ClassVar[str] = ""
    #: The kind of output ``predict`` returns (``detectors.kinds``); stored with each prediction.
    output_kind: ClassVar[str] = KIND_GENDER
    #: Bumped whenever code or default weights change what the detector would say; together
    #: with the weights identifier it forms the stored prediction version.
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ""
    #: The options this detector takes besides ``device``, name → what it does. They arrive as
    #: ``registry.get(key, **options)`` or ``run_detectors --option NAME=VALUE``; any other name
    #: is refused by ``__init__`` (a typo must not silently run the defaults).
    option_help: ClassVar[dict[str, str]] = {}
    #: True for a detector that must run in the process that stores its predictions (it uses the
    #: database itself, as api_judge's response cache does): ``--executor`` is refused for it.
    in_process_only: ClassVar[bool] = False
    #: True for a judge: ``predict`` takes ``questions=`` (one tuple of questions per image) and
    #: the run binds the detector to the study before it reads ``version_id`` (``detectors.judges``).
    needs_questions: ClassVar[bool] = False

    @classmethod
    def number_option(
        cls, name: str, value: Any, kind: type[int] | type[float] = float, *, minimum: float = 0
    ) -> Any:
        """``value`` as an int or float of at least ``minimum``, or DetectorOptionError naming the option."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if number != number or number < minimum or (kind is int and not number.is_integer()):
            wanted = "an integer" if kind is int else "a number"
            raise DetectorOptionError(
                f"{cls.key}'s option {name} must be {wanted} ≥ {minimum:g}, got {value!r}."
            )
        return kind(number)

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        unknown = sorted(set(options) - set(self.option_help))
        if unknown:
            known = ", ".join(sorted(self.option_help)) or "none"
            raise DetectorOptionError(
                f"{self.key or type(self).__name__} does not take the option(s) {', '.join(unknown)}; "
                f"its options: {known}."
            )
        self.device = device
        self.options = options
        self._loaded = False

    @property
    def declared_kind(self) -> str:
        """The kind this instance's outputs are: ``output_kind``, unless a judge's study says
        otherwise (a judge of a gender study gives gender verdicts, of other studies answers)."""
        return self.output_kind

    @property
    def version_id(self) -> str:
        """The version stored with each prediction. Subclasses add the weights they use."""
        return self.version

    def load(self) -> None:
        """Load weights. Override; raise DetectorUnavailable with the setting's name."""

    def ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()
            self._loaded = True

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        """One output per image, in order: the weights loaded, then ``predict_one`` on each image. A
        detector that gains from batching overrides this instead."""
        self.ensure_loaded()
        return [self.predict_one(image) for image in batch]

    def predict_one(self, image: PILImage) -> DetectorOutput:
        raise NotImplementedError

    def usage_take(self) -> dict[str, float]:
        """What the detector spent since the last call, which the run adds to its row."""
        return {}
