"""A question kind defined only under ``tests/`` labels end to end with no edit to the core and
no migration: a rating from 1 to 5, registered by installing ``tests.toy_kind`` (its ``AppConfig``
lists ``question_kinds``), read from a questions CSV, drawn by its own partial on the real
labeling screen, stored by a key press, refused with the 400 re-show when out of range.

Every file it needed, all under ``tests/toy_kind/``: ``apps.py`` (the registration),
``kinds.py`` (the ``RatingKind`` unit), ``templates/toy_kind/rating.html`` (its partial),
``static/toy_kind/rating.js`` (its script) and this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.core.checks import Error
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import modify_settings
from django.urls import reverse

from annotate.models import Label
from studies import checks, kinds
from studies.checks import check_kinds
from studies.errors import ImportRejected
from studies.kinds import QuestionKind, kind_registered, question_kinds
from studies.models import Question
from studies.services import questions_csv_read, study_create
from tests.factories import ItemFactory, PromptFactory
from tests.toy_kind.kinds import RATING, RatingKind

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def rating_installed() -> Iterator[None]:
    """The toy app installed: the only thing that registers the kind."""
    assert "rating" not in question_kinds()
    with modify_settings(INSTALLED_APPS={"append": "tests.toy_kind"}):
        yield
    assert "rating" not in question_kinds()


def _questions_csv(tmp_path):
    path = tmp_path / "questions.csv"
    path.write_text("key,text,choices,kind\nlook,How good does it look?,,rating\n", encoding="utf-8")
    return path


def test_a_kind_no_app_registers_is_refused_naming_the_kinds(tmp_path):
    with pytest.raises(ImportRejected, match="kind 'rating' is not one of choice, toggle, boxes, classes"):
        questions_csv_read(_questions_csv(tmp_path))
    with pytest.raises(ValidationError, match="is not one of"):
        Question(study_id=1, key="look", text="Look?", choices=[], kind="rating").clean_fields(
            exclude=["study"]
        )


def test_a_rating_labels_end_to_end_through_the_labeling_screen(
    rating_installed, tmp_path, client_for, annotator_a
):
    assert question_kinds()["rating"] is RATING
    assert check_kinds() == []
    study = study_create(
        slug="rated", protocol="gender", questions=questions_csv_read(_questions_csv(tmp_path))
    )
    question = study.questions.get()
    question.full_clean()  # the model's validator takes the registered kind
    assert question.kind == "rating"
    study.annotators.add(annotator_a)
    item = ItemFactory(prompt=PromptFactory(study=study))
    client = client_for(annotator_a)

    page = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    assert 'class="question kind-rating"' in page
    assert page.count('name="answer_look"') == 5  # its partial
    assert 'data-key="5"' in page
    assert "toy_kind/rating.js" in page  # its script, on the page of a study that asks it
    assert "Rate “How good does it look?” from 1 (worst) to 5 (best)" in page  # its keys

    hidden = dict(re.findall(r'type="hidden" name="([a-z_]+)" value="([^"]*)"', page))
    url = reverse("annotate:label_submit", args=[study.slug, item.pk])
    refused = client.post(url, hidden | {"answer_look": "6"}, **HTMX)
    assert refused.status_code == 400
    assert "“6” is no rating of “look”: rate it 1 to 5." in refused.content.decode()
    assert 'class="question kind-rating"' in refused.content.decode()  # the same item, re-shown
    assert not Label.objects.exists()

    stored = client.post(url, hidden | {"answer_look": "4"}, **HTMX)
    assert stored.status_code == 200
    assert Label.objects.get().value == "4"

    back = client.get(
        reverse("annotate:label_study", args=[study.slug]) + f"?item={item.pk}"
    ).content.decode()
    assert re.search(r'value="4" checked data-key="4"', back)  # the stored rating drawn again


def test_a_kind_registered_at_run_time_is_checked_and_taken_away_after(rating_installed):
    class Broken(RatingKind):
        name = "broken"
        template = "toy_kind/missing.html"
        script = "toy_kind/missing.js"

    with kind_registered(Broken()):
        assert "broken" in question_kinds()
        found = check_kinds()
        assert [m.id for m in found] == ["studies.E012", "studies.E013"]
        assert all(isinstance(m, Error) for m in found)
    assert "broken" not in question_kinds()
    with kind_registered(QuestionKind()):
        assert [m.id for m in check_kinds()] == ["studies.E011"]


def test_a_wrong_dotted_path_or_a_name_taken_twice_fails_manage_py_check(monkeypatch):
    monkeypatch.setattr(
        checks,
        "kind_registrations",
        lambda: [("toy_kind", "tests.toy_kind.kinds.NOPE"), ("a", kinds.CHOICE), ("b", kinds.ChoiceKind())],
    )
    assert [m.id for m in check_kinds()] == ["studies.E010", "studies.E014"]
    with pytest.raises(SystemCheckError, match=r"studies\.E010"):
        call_command("check")
