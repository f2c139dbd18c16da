"""Fixtures of the annotate service and selector tests."""

from __future__ import annotations

import pytest

from annotate import services
from tests.factories import ImageFactory, PromptFactory


@pytest.fixture
def make_images(study):
    """make_images(count, **fields) -> that many images of the gender study, in id order."""

    def make(count: int, **fields):
        prompt = PromptFactory(study=study)
        return [ImageFactory(prompt=prompt, **fields) for _ in range(count)]

    return make


@pytest.fixture
def label_via_queue():
    """label_via_queue(study, annotator, value) -> the label the annotator gives to the image
    the queue shows them first (claims a seat the way the labelling screen does)."""

    def label(study, annotator, value: str, reason: str = ""):
        seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
        return services.annotation_submit(image=seat.image, annotator=annotator, value=value, reason=reason)

    return label
