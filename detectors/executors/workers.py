"""The workers: what runs where the model is, on plain data in and out (no Django)."""

from __future__ import annotations

import io
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors.executors import ItemError, WorkerSpec

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from detectors.base import Detector


def error_text(exc: BaseException) -> str:
    """``"ValueError: bad value"``, cut to what a database text column should hold."""
    return f"{type(exc).__name__}: {exc}"[:2000]


@dataclass(frozen=True)
class ImageBytes:
    """An image file's bytes, sent to a worker that cannot read the file; ``path`` names it in
    error messages, so they read exactly as when the worker opens the file itself."""

    path: str
    data: bytes


def image_open(source: str | Path | ImageBytes) -> PILImage | str:
    """An RGB image from a file path or an ``ImageBytes``, or ``"cannot open image: …"``. Never raises for a
    bad file: a corrupt or missing image is that image's failure, stored with its error, never the batch's."""
    # The one normalisation every consumer shares (EXIF orientation, 16-bit and palette/alpha to
    # 8-bit RGB); studies.imaging imports nothing of Django, so workers may use it.
    from studies.imaging import open_rgb

    fp = io.BytesIO(source.data) if isinstance(source, ImageBytes) else source
    try:
        return open_rgb(fp)
    except Exception as exc:  # any decoder error of a corrupt file; stored, never fatal
        text = error_text(exc)
        if isinstance(source, ImageBytes):  # Pillow names the buffer; name the file instead
            text = text.replace(repr(fp), repr(source.path))
        return f"cannot open image: {text}"


@dataclass(frozen=True)
class AskedImage:
    """A judge's payload: the image (a path or ``ImageBytes``) and the keys of the questions its
    items ask (``()``: every question of the study the judge is bound to)."""

    source: str | ImageBytes
    questions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Predicted:
    """A detector's output for one image as plain data — its ``kind`` and the JSON object
    ``DetectorOutput.as_output()`` gives — and the seconds it took (its share of the batch)."""

    kind: str
    output: dict[str, Any]
    seconds: float | None


def predicted(detector: Detector, output: Any, seconds: float | None) -> Predicted | ItemError:
    """One output of ``detector.predict`` as a ``Predicted``; anything that is no
    ``DetectorOutput`` is that image's error (the driver refuses a kind other than declared)."""
    from detectors.base import DetectorOutput

    if not isinstance(output, DetectorOutput):
        declared = detector.declared_kind
        return ItemError(
            f"{detector.key} declares {declared} output but returned {type(output).__name__}", seconds
        )
    return Predicted(output.kind, output.as_output(), seconds)


def _predict(detector: Detector, images: list[PILImage], questions: list[Any] | None) -> list[Any]:
    """``detector.predict``, with each image's questions for a judge (``needs_questions``)."""
    if detector.needs_questions:
        return detector.predict(images, questions=questions)  # type: ignore[call-arg]
    return detector.predict(images)


def outputs_predict(
    detector: Detector,
    opened: Sequence[PILImage | str],
    questions: Sequence[Sequence[str]] | None = None,
) -> list[Predicted | ItemError]:
    """One ``Predicted`` or ``ItemError`` per entry of ``opened``, in order."""
    started = time.perf_counter()
    results: list[Predicted | ItemError | None] = [None] * len(opened)
    good: list[tuple[int, PILImage]] = []
    for index, item in enumerate(opened):
        if isinstance(item, str):
            results[index] = ItemError(item)
        else:
            good.append((index, item))
    asked: list[Any] | None = None
    if detector.needs_questions:
        ask = getattr(detector, "ask", None)
        if ask is None:
            raise RuntimeError(f"{detector.key} asks a study's questions but is bound to none")
        keys = questions if questions is not None else [()] * len(opened)
        asked = [ask.for_keys(keys[index]) for index, _ in good]
    if good:
        try:
            outputs = _predict(detector, [pil for _, pil in good], asked)
            if len(outputs) != len(good):
                raise RuntimeError(f"detector returned {len(outputs)} outputs for {len(good)} images")
        except Exception:
            # One bad image should not cost the whole batch: retry one by one to find it.
            for n, (index, pil) in enumerate(good):
                results[index] = _predict_one(detector, pil, None if asked is None else [asked[n]])
        else:
            per_image = (time.perf_counter() - started) / len(good)
            for (index, _), output in zip(good, outputs, strict=True):
                results[index] = predicted(detector, output, per_image)
    return results  # type: ignore[return-value]  # every slot was filled above


def _predict_one(detector: Detector, pil: PILImage, questions: list[Any] | None) -> Predicted | ItemError:
    started = time.perf_counter()
    try:
        outputs = _predict(detector, [pil], questions)
        if len(outputs) != 1:
            raise RuntimeError(f"detector returned {len(outputs)} outputs for 1 image")
    except Exception as exc:  # the detector's own failure on this image, kept with its error
        return ItemError(error_text(exc), time.perf_counter() - started)
    return predicted(detector, outputs[0], time.perf_counter() - started)


class DetectorWorker:
    """A detector held for the worker's lifetime."""

    def __init__(
        self, *, detector_class: str, options: dict[str, Any], device: str = "cpu", ask: Any = None
    ) -> None:
        self.detector_class = detector_class
        self.options = options
        self.device = device
        #: A judge's ``detectors.judges.StudyAsk`` (plain data): what the driver bound it to.
        self.ask = ask
        self.detector: Detector | None = None

    def load(self) -> dict[str, Any]:
        """Build and load the detector; raises its DetectorUnavailable. → key and version."""
        spec = WorkerSpec(self.detector_class, {"device": self.device, **self.options})
        detector = spec.build()
        if self.ask is not None:
            detector.questions_bind(self.ask)
        detector.ensure_loaded()
        self.detector = detector
        return {"detector": detector.key, "version": detector.version_id}

    def prepare(
        self, payload: str | ImageBytes | AskedImage
    ) -> PILImage | str | tuple[PILImage | str, tuple[str, ...]]:
        if isinstance(payload, AskedImage):
            return image_open(payload.source), payload.questions
        return image_open(payload)

    def run(self, keys: Sequence[Hashable], prepared: Sequence[Any]) -> list[Predicted | ItemError]:
        if self.detector is None:
            self.load()
        assert self.detector is not None
        if prepared and isinstance(prepared[0], tuple):  # a judge's images, with their questions
            return outputs_predict(self.detector, [p[0] for p in prepared], [p[1] for p in prepared])
        return outputs_predict(self.detector, prepared)
