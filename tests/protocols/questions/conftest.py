"""A questions study with two single-choice questions, compared across the ``skin`` column."""

from __future__ import annotations

import pytest

from studies.services import questions_csv_read, study_define
from tests.factories import ItemFactory, PromptFactory
from tests.protocols.questions.data import questions_csv


@pytest.fixture
def questions_study(db, tmp_path, annotator_a, annotator_b):
    study = study_define(
        slug="qs",
        protocol="questions",
        questions=questions_csv_read(questions_csv(tmp_path)),
        parameters={"compare": "skin"},
        labels_per_item=2,
    ).study
    study.annotators.add(annotator_a, annotator_b)
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    items = [
        ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model="sdxl")
        for skin in ("light", "dark", "light", "dark")
    ]
    return study, items
