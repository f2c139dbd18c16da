"""The gender report's human counts, counted in Python from the one read of the final labels
that the detector verdicts share: the same counts the grouped SQL query gave, items without a
prompt and the category filter included."""

from __future__ import annotations

import pytest
from django.db.models import Count

from annotate.models import FinalLabel, FinalLabelSource
from protocols.gender import selectors as gsel
from reports.selectors import Scope
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory
from tests.reports import dashboard_data

pytestmark = pytest.mark.django_db


def _grouped_in_sql(scope: Scope, question) -> list[dict]:
    rows: dict = {}
    for g in (
        FinalLabel.objects.filter(scope.q("item__"), question=question)
        .values("item__t2i_model", "item__prompt_id", "item__prompt__category", "item__prompt__word")
        .annotate(n=Count("pk"))
        .values_list(
            "item__t2i_model", "item__prompt_id", "item__prompt__category", "item__prompt__word", "value", "n"
        )
    ):
        model, prompt_id, category, word, value, n = g
        row = rows.setdefault(
            (model, prompt_id),
            {
                "t2i_model": model,
                "prompt_id": prompt_id,
                "category": category or "",
                "word": word or "",
                "counts": {},
            },
        )
        row["counts"][value] = row["counts"].get(value, 0) + n
    return sorted(
        rows.values(), key=lambda r: (r["t2i_model"], r["category"], r["word"], r["prompt_id"] or 0)
    )


@pytest.mark.parametrize("category", [None, "place", "profession", "nothing"])
def test_human_counts_from_the_shared_read_are_the_grouped_counts(study, annotator_a, annotator_b, category):
    dashboard_data.build(study, annotator_a, annotator_b)
    question = study.questions.get(key="gender")
    for n, model in enumerate(("sdxl", "sdxl", "sd3")):  # items without a prompt, and one more prompt
        FinalLabelFactory(
            item=ItemFactory(study=study, prompt=None, t2i_model=model, index=100 + n), value="female"
        )
    other = PromptFactory(study=study, category="place", word="beach")
    FinalLabelFactory(
        item=ItemFactory(prompt=other, t2i_model="sd3"), value="male", source=FinalLabelSource.AGREED
    )
    scope = Scope(study, category=category)
    finals = gsel.final_rows(scope.narrowed(category=None), question=question)
    counted = gsel.human_prompt_counts(study, finals, category=category)
    assert [{k: v for k, v in row.items() if k != "prompt"} for row in counted] == _grouped_in_sql(
        scope, question
    )
    assert counted or category == "nothing"
    if category is None:
        assert any(row["prompt_id"] is None and row["counts"] == {"female": 2} for row in counted)
