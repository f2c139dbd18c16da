"""the researcher gate and "study by slug", written once in the core and used by
every app (their pages' 403/404 answers are pinned by each app's own view tests)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.test import RequestFactory

from studies import permissions
from studies.selectors import study_by_slug, study_slugs
from tests.factories import StudyFactory

VERBS = ["get", "post", "put", "patch", "delete"]


def _page(request, **kwargs):
    return HttpResponse("the page")


def _request(verb: str, user):
    request = getattr(RequestFactory(), verb)("/somewhere/?x=1")
    request.user = user
    return request


@pytest.mark.parametrize("verb", VERBS)
def test_the_researcher_gate_sends_anonymous_users_to_the_login_page(verb):
    view = permissions.researcher_only()(_page)
    response = view(_request(verb, AnonymousUser()))
    assert response.status_code == 302
    assert "login" in response["Location"]
    assert "next=/somewhere/%3Fx%3D1" in response["Location"]


# The marker: the personas are fixtures of the database, asked for by name inside the test, which
# pytest cannot see at collection (a test run before any other on its worker found no tables).
@pytest.mark.django_db
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
def test_the_researcher_gate_refuses_other_personas_every_verb_with_its_message(verb, persona, request):
    user = request.getfixturevalue(persona)
    view = permissions.researcher_only(message="Reports are for researchers.")(_page)
    with pytest.raises(PermissionDenied) as refused:
        view(_request(verb, user))
    assert refused.value.args == ("Reports are for researchers.",)
    with pytest.raises(PermissionDenied) as bare:
        permissions.researcher_only()(_page)(_request(verb, user))
    assert bare.value.args == ()


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_the_researcher_gate_lets_researchers_and_admins_in_then_checks_the_verb(persona, request):
    user = request.getfixturevalue(persona)
    view = permissions.researcher_only(methods=("GET", "HEAD", "POST"))(_page)
    assert view(_request("get", user)).content == b"the page"
    assert view(_request("post", user)).status_code == 200
    refused = view(_request("delete", user))
    assert refused.status_code == 405
    assert refused["Allow"] == "GET, HEAD, POST"


def test_every_app_uses_the_one_gate():
    from annotate.api import disputes, items, results
    from annotate.views import labeling as annotate_views
    from config.api import ResearcherApi
    from crowd.api import ParticipantListApi
    from detectors.api import PredictionListApi, RunListApi
    from estimates.api import EstimateApi, EstimateJobApi, SamplingRoundListApi
    from quality.api import AnnotatorListApi

    assert permissions.IsResearcher in ResearcherApi.permission_classes
    researcher_views = [
        ParticipantListApi,
        AnnotatorListApi,
        PredictionListApi,
        RunListApi,
        EstimateApi,
        EstimateJobApi,
        SamplingRoundListApi,
        disputes.DisputeListApi,
        items.ItemListApi,
        results.AgreementApi,
        results.GroundTruthExportApi,
    ]
    for view in researcher_views:
        assert issubclass(view, ResearcherApi), view
        assert view.permission_classes == ResearcherApi.permission_classes, view
    assert annotate_views.guarded is permissions.guarded


def test_the_drf_gate_admits_researchers_and_admins_only(researcher, admin_user, annotator_a, outsider):
    gate = permissions.IsResearcher()
    verdicts = {
        user.username: gate.has_permission(_request("get", user), None)
        for user in (researcher, admin_user, annotator_a, outsider)
    }
    assert verdicts == {"rita": True, "adam": True, "anna": False, "oscar": False}
    assert gate.message == "Only researchers and admins may use this endpoint."


@pytest.mark.django_db
def test_study_by_slug_finds_the_study_or_raises_the_callers_error_listing_the_slugs():
    StudyFactory(slug="zeta", name="A")
    found = StudyFactory(slug="alpha", name="B")
    assert study_by_slug("alpha", missing=AssertionError) == found
    with pytest.raises(LookupError, match=r"^no 'beta' \(studies: alpha, zeta\)$"):
        study_by_slug("beta", missing=lambda known: LookupError(f"no 'beta' (studies: {known})"))


@pytest.mark.django_db
def test_study_slugs_is_empty_without_studies():
    assert study_slugs() == ""
