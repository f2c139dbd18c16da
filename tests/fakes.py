"""A fake detector for tests that need predictions without torch, dlib or weights.

``FakeDetector`` (key "fake", version "1") decides from the image content alone, so the same
image always gets the same verdict: mean pixel value < 85 → male, < 170 → female, else
filtered as low confidence. Use the ``fake_detector`` fixture (import it into a conftest or a
test module) or the ``registered_fake()`` context manager to put it in the registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import ClassVar

import pytest
from PIL import ImageStat
from PIL.Image import Image as PILImage

from detectors import registry
from detectors.base import Detector, DetectorOutput, DetectorUnavailable

FAKE_KEY = "fake"


def mean_pixel(image: PILImage) -> float:
    return sum(ImageStat.Stat(image.convert("L")).mean)


def verdict_for(image: PILImage) -> DetectorOutput:
    """The fake rule, exposed so tests can compute the expected verdict of an image."""
    mean = mean_pixel(image)
    scores = {"mean": round(mean, 3)}
    if mean < 85:
        return DetectorOutput(verdict="male", scores=scores)
    if mean < 170:
        return DetectorOutput(verdict="female", scores=scores)
    return DetectorOutput.filtered("low_confidence", scores=scores)


class FakeDetector(Detector):
    """Deterministic from pixels. Class attributes let a test make it fail on purpose:

    - ``fail_on_load``: ``load()`` raises DetectorUnavailable with this message;
    - ``fail_when``: predict raises ValueError for any batch containing an image for which
      this predicate is true (so a batch fails, and the one-by-one retry isolates the image);
    - ``calls``: how many images each predict call got (for batching assertions).
    """

    key: ClassVar[str] = FAKE_KEY
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Test double: verdict from the mean pixel value."
    fail_on_load: ClassVar[str] = ""
    fail_when: ClassVar[object] = None
    calls: ClassVar[list[int]] = []

    def load(self) -> None:
        if self.fail_on_load:
            raise DetectorUnavailable(self.fail_on_load)

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        type(self).calls.append(len(batch))
        # Read without binding: a lambda stored on the class would otherwise become a method.
        predicate = inspect.getattr_static(type(self), "fail_when")
        if callable(predicate) and any(predicate(image) for image in batch):
            raise ValueError("fake detector refuses this image")
        return [verdict_for(image) for image in batch]


def _reset() -> None:
    FakeDetector.fail_on_load = ""
    FakeDetector.fail_when = None
    FakeDetector.calls = []


@contextmanager
def registered_fake() -> Iterator[type[FakeDetector]]:
    """Register FakeDetector under "fake" for the duration; restores the registry after."""
    previous = registry.DETECTORS.get(FAKE_KEY)
    _reset()
    registry.register(FAKE_KEY, f"{__name__}.FakeDetector")
    try:
        yield FakeDetector
    finally:
        _reset()
        if previous is None:
            registry.unregister(FAKE_KEY)
        else:
            registry.register(FAKE_KEY, previous)


@pytest.fixture
def fake_detector() -> Iterator[type[FakeDetector]]:
    """The FakeDetector class, registered as "fake" for one test."""
    with registered_fake() as cls:
        yield cls
