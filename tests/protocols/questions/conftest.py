"""A questions study with two single-choice questions, compared across the ``skin`` column."""

from __future__ import annotations

import pytest

from tests.factories import ItemFactory
from tests.protocols.questions.data import define_questions_study


@pytest.fixture
def questions_study(db, tmp_path, annotator_a, annotator_b):
    study, prompt = define_questions_study(tmp_path, slug="qs", labels_per_item=2)
    study.annotators.add(annotator_a, annotator_b)
    items = [
        ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model="sdxl")
        for skin in ("light", "dark", "light", "dark")
    ]
    return study, items
