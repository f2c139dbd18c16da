"""Every HTML view, every verb, as each wrong persona: 403 (logged in; a study's labeling pages:
404, as if it did not exist) or the login page (anonymous) — and nothing written. Annotators label only; researchers and admins see the rest."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotate.models import Assignment, FinalLabel, Label
from tests.factories import ItemFactory, PromptFactory

VERBS = ("get", "post", "put", "patch", "delete", "head", "options")


@pytest.fixture
def item(study):
    return ItemFactory(prompt=PromptFactory(study=study))


def _researcher_urls(study, item) -> list[str]:
    return [
        reverse("annotate:disputes"),
        reverse("annotate:disputes", args=[study.slug]),
        reverse("annotate:dispute", args=[item.pk]),
        reverse("annotate:dispute_question", args=[item.pk, "gender"]),
        reverse("annotate:images"),
        reverse("annotate:images", args=[study.slug]),
        reverse("annotate:image", args=[item.pk]),
        reverse("annotate:items"),
        reverse("annotate:items", args=[study.slug]),
        reverse("annotate:item", args=[item.pk]),
        reverse("annotate:agreement"),
        reverse("annotate:agreement", args=[study.slug]),
        reverse("annotate:annotator_stats"),
        reverse("annotate:annotator_stats", args=[study.slug]),
    ]


def _study_label_urls(study, item) -> list[str]:
    return [
        reverse("annotate:label_study", args=[study.slug]),
        reverse("annotate:label_submit", args=[study.slug, item.pk]),
        reverse("annotate:label_undo", args=[study.slug]),
    ]


def _call(client, verb: str, url: str):
    # A POST is a complete, valid answer or resolution: refusal must come from the role.
    data = {"answer_gender": "male", "value": "male", "note": "n"} if verb == "post" else None
    return getattr(client, verb)(url, data) if data else getattr(client, verb)(url)


def _assert_forbidden_everywhere(client, urls: list[str]) -> None:
    for url in urls:
        for verb in VERBS:
            response = _call(client, verb, url)
            assert response.status_code == 403, (verb, url, response.status_code)


@pytest.mark.parametrize("persona", ["annotator_a", "annotator_b", "annotator_c", "outsider"])
def test_non_researchers_get_403_on_every_researcher_page_and_verb(request, client_for, persona, study, item):
    user = request.getfixturevalue(persona)
    _assert_forbidden_everywhere(client_for(user), _researcher_urls(study, item))
    assert not FinalLabel.objects.exists()


@pytest.mark.parametrize("persona", ["annotator_c", "researcher", "admin_user", "outsider"])
def test_users_outside_the_study_cannot_label_it_with_any_verb(request, client_for, persona, study, item):
    # "No such study for you" (404), as for a study that does not exist: the answer does not
    # tell an outsider that the study exists.
    client = client_for(request.getfixturevalue(persona))
    for url in _study_label_urls(study, item):
        for verb in VERBS:
            response = _call(client, verb, url)
            assert response.status_code == 404, (verb, url, response.status_code)
            missing = _call(client, verb, url.replace(f"/{study.slug}/", "/no-such-study/"))
            assert missing.status_code == 404, (verb, url)
    assert not Label.objects.exists()
    assert not Assignment.objects.exists()


@pytest.mark.parametrize("persona", ["researcher", "outsider"])
def test_users_without_the_annotator_role_or_a_study_get_403_on_the_label_entry(
    request, client_for, persona, study
):
    _assert_forbidden_everywhere(client_for(request.getfixturevalue(persona)), [reverse("annotate:label")])


def test_anonymous_visitors_are_sent_to_login_from_every_view_and_verb(client, study, item):
    urls = [
        *_researcher_urls(study, item),
        *_study_label_urls(study, item),
        reverse("annotate:label"),
        reverse("annotate:no_role"),
    ]
    login = reverse("login")
    for url in urls:
        for verb in VERBS:
            response = _call(client, verb, url)
            assert response.status_code == 302, (verb, url)
            assert response["Location"].startswith(login), (verb, url)
    assert not Label.objects.exists()


def test_annotator_of_another_study_cannot_submit_on_this_studys_item(client_for, annotator_c, study, item):
    from tests.factories import StudyFactory

    other = StudyFactory(slug="other")
    other.annotators.add(annotator_c)
    # Their own study's slug, with this study's item: the item is not found in their study.
    response = client_for(annotator_c).post(
        reverse("annotate:label_submit", args=[other.slug, item.pk]), {"answer_gender": "male"}
    )
    assert response.status_code == 404
    assert not Label.objects.exists()


def test_right_persona_with_a_wrong_verb_gets_405(client_for, annotator_a, researcher, study, item):
    annotator = client_for(annotator_a)
    assert annotator.get(reverse("annotate:label_submit", args=[study.slug, item.pk])).status_code == 405
    assert annotator.post(reverse("annotate:label_study", args=[study.slug])).status_code == 405
    assert annotator.delete(reverse("annotate:label_undo", args=[study.slug])).status_code == 405
    research = client_for(researcher)
    assert research.post(reverse("annotate:images")).status_code == 405
    assert research.put(reverse("annotate:dispute", args=[item.pk])).status_code == 405


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_and_admins_open_every_researcher_page(request, client_for, persona, study, item):
    client = client_for(request.getfixturevalue(persona))
    for url in _researcher_urls(study, item):
        assert client.get(url).status_code == 200, url
