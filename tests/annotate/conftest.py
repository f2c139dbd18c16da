"""Fixtures of the annotate service and selector tests."""

from __future__ import annotations

import pytest

from annotate import services
from tests.annotate.gender import submit
from tests.factories import ItemFactory, PromptFactory


@pytest.fixture
def make_items(study):
    """make_items(count, **fields) -> that many one-image items of the gender study, in id order."""

    def make(count: int, **fields):
        prompt = PromptFactory(study=study)
        return [ItemFactory(prompt=prompt, **fields) for _ in range(count)]

    return make


@pytest.fixture
def label_via_queue():
    """label_via_queue(study, annotator, value) -> the label the annotator gives to the item
    the queue shows them first (claims a seat the way the labelling screen does)."""

    def label(study, annotator, value: str, reason: str = ""):
        seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
        return submit(item=seat.item, annotator=annotator, value=value, reason=reason)

    return label
