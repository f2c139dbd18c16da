"""The researcher's current study is remembered across sections: a study named by a
page (its path, ``?study=``, its item) opens by default in every other section — Report, Items,
Disputes, Agreement, Annotators — instead of the "Choose a study" page; ``?choose=1`` asks again,
and the study's navigation links its Report."""

from __future__ import annotations

import pytest
from django.urls import reverse

from studies import permissions
from studies.session import SESSION_KEY
from tests.factories import ItemFactory, PromptFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db

SECTIONS = ("annotate:images", "annotate:disputes", "annotate:agreement", "annotate:annotator_stats")


@pytest.fixture
def two_studies(study):
    """The gender study of the fixtures ("Gender") and a second one, each with an item."""
    second = StudyFactory(name="Second study", slug="second")
    ItemFactory(prompt=PromptFactory(study=second, word="pilot"))
    ItemFactory(prompt=PromptFactory(study=study, word="nurse"))
    return study, second


@pytest.fixture
def rita(researcher, client_for):
    return client_for(researcher)


def _html(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def _shows(html: str, study) -> bool:
    """The page is the study's own section (not the chooser)."""
    return "Choose a study" not in html and f"<strong>{study.name}</strong>" in html


def test_without_a_current_study_each_section_asks_which(two_studies, rita):
    for name in SECTIONS:
        assert "Choose a study" in _html(rita.get(reverse(name))), name
    assert "Choose a study" in _html(rita.get(reverse("reports:overview")))


@pytest.mark.parametrize("first", SECTIONS)
def test_a_study_chosen_in_one_section_opens_in_every_other(two_studies, rita, first):
    _, second = two_studies
    _html(rita.get(reverse(first, args=[second.slug])))
    for name in SECTIONS:
        assert _shows(_html(rita.get(reverse(name))), second), name
    report = _html(rita.get(reverse("reports:overview")))
    assert f'<option value="{second.slug}" selected>' in report


def test_a_study_chosen_on_the_report_opens_in_the_other_sections(two_studies, rita):
    study, second = two_studies
    _html(rita.get(reverse("reports:overview"), {"study": second.slug}))
    assert _shows(_html(rita.get(reverse("annotate:disputes"))), second)
    # Choosing the other study on the report makes it the current one.
    _html(rita.get(reverse("reports:overview"), {"study": study.slug}))
    assert _shows(_html(rita.get(reverse("annotate:agreement"))), study)


def test_an_item_page_makes_its_study_the_current_one(two_studies, rita):
    _, second = two_studies
    item = second.items.get()
    _html(rita.get(reverse("annotate:image", args=[item.pk])))
    assert _shows(_html(rita.get(reverse("annotate:images"))), second)


def test_choose_asks_again_and_a_deleted_study_is_forgotten(two_studies, rita):
    study, second = two_studies
    _html(rita.get(reverse("annotate:images", args=[second.slug])))
    chooser = _html(rita.get(reverse("annotate:agreement"), {"choose": "1"}))
    assert "Choose a study" in chooser
    assert reverse("annotate:agreement", args=[study.slug]) in chooser
    assert "Choose a study" in _html(rita.get(reverse("reports:overview"), {"choose": "1"}))
    second.delete()
    # Only one study is left: it opens, and becomes the current one.
    assert _shows(_html(rita.get(reverse("annotate:disputes"))), study)
    assert rita.session[SESSION_KEY] == study.pk


def test_a_study_remembered_by_one_researcher_is_not_anothers(two_studies, rita, client_for):
    _, second = two_studies
    _html(rita.get(reverse("annotate:images", args=[second.slug])))
    other = client_for(UserFactory(username="rob", role=permissions.RESEARCHER))
    assert "Choose a study" in _html(other.get(reverse("annotate:images")))


def test_the_study_navigation_links_its_report_and_a_change_of_study(two_studies, rita):
    _, second = two_studies
    html = _html(rita.get(reverse("annotate:agreement", args=[second.slug])))
    nav = html[html.index('class="study-nav"') :].split("</nav>")[0]
    assert f'href="{reverse("reports:overview")}?study={second.slug}">Report</a>' in nav
    assert f'href="{reverse("annotate:agreement")}?choose=1"' in nav
    assert f'href="{reverse("annotate:agreement", args=[second.slug])}" aria-current="page">Agreement' in nav
    item = second.items.get()
    item_nav = _html(rita.get(reverse("annotate:image", args=[item.pk])))
    assert f'href="{reverse("annotate:images")}?choose=1"' in item_nav
