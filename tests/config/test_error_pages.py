"""Error pages: in the site's layout with a way back; 403 says who may see what; each renders
when the error comes before any user is loaded, when context processors fail, and (500) with
the database down. /api/ paths keep Django's own rendering."""

from __future__ import annotations

import logging
import re

import pytest
from django.db.utils import OperationalError
from django.test import Client, RequestFactory
from django.urls import reverse

from config import errors
from config import views as config_views
from tests.factories import StudyFactory

LAYOUT = '<a class="brand" href="/">BiasLab</a>'
STYLESHEET = "/static/css/app.css"
WAY_BACK = '<a href="/">Back to BiasLab</a>'


def _in_layout(response, status: int) -> str:
    assert response.status_code == status
    page = response.content.decode()
    assert LAYOUT in page
    assert STYLESHEET in page
    assert WAY_BACK in page
    return page


def failing_processor(request):
    raise RuntimeError("context processor down")


@pytest.mark.django_db
def test_an_unknown_address_is_a_404_in_the_layout(client):
    page = _in_layout(client.get("/no-such-page/"), 404)
    assert "Page not found" in page
    assert "no-such-page" not in page  # the resolver's patterns and path are not shown


@pytest.mark.django_db
def test_a_404_shows_the_views_own_explanation(researcher, client_for, study):
    # With one study in the database the chart download reads it; the chart name is unknown.
    page = _in_layout(client_for(researcher).get(reverse("reports:chart", args=["nope", "svg"])), 404)
    assert "No chart &#x27;nope&#x27;." in page


@pytest.mark.django_db
def test_a_403_says_who_is_asking_and_which_role_may_see_what(annotator_a, client_for):
    page = _in_layout(client_for(annotator_a).get(reverse("reports:overview")), 403)
    assert "Reports are for researchers." in page  # the view's own reason
    assert "You are logged in as <strong>anna</strong>, annotator." in page
    for role in ("annotator", "researcher", "admin"):
        assert f"<tr><th>{role}</th>" in page
    assert "ask an admin" in page


@pytest.mark.django_db
def test_a_403_without_a_reason_still_explains_the_roles(outsider, client_for):
    page = _in_layout(client_for(outsider).get(reverse("annotate:agreement")), 403)
    assert "Your account may not see this page." in page
    assert "with no role yet" in page


@pytest.mark.django_db
def test_a_disallowed_host_is_a_400_in_the_layout_before_any_user_is_loaded(client):
    page = _in_layout(client.get("/", HTTP_HOST="attacker.example"), 400)
    assert "Bad request" in page


@pytest.mark.django_db
def test_a_failed_csrf_check_is_a_403_in_the_layout(settings):
    settings.DEBUG = False
    client = Client(enforce_csrf_checks=True)
    page = _in_layout(client.post(reverse("login"), {"username": "x", "password": "y"}), 403)
    assert "reload the page" in page


@pytest.mark.django_db
def test_error_pages_render_when_a_context_processor_fails(client, settings, caplog):
    settings.TEMPLATES = [
        {
            **settings.TEMPLATES[0],
            "OPTIONS": {
                **settings.TEMPLATES[0]["OPTIONS"],
                "context_processors": [
                    *settings.TEMPLATES[0]["OPTIONS"]["context_processors"],
                    "tests.config.test_error_pages.failing_processor",
                ],
            },
        }
    ]
    with caplog.at_level(logging.ERROR, logger="config.errors"):
        _in_layout(client.get("/no-such-page/"), 404)
    assert "could not use the request context" in caplog.text


@pytest.mark.parametrize(
    ("handler", "status"),
    [(errors.bad_request, 400), (errors.permission_denied, 403), (errors.page_not_found, 404)],
)
def test_handlers_render_for_a_request_that_never_got_a_user(handler, status):
    # No `db` fixture: any database access would fail (and show as a plain-HTML fallback).
    request = RequestFactory().get("/somewhere/")
    assert not hasattr(request, "user")
    _in_layout(handler(request, Exception()), status)


def test_the_500_page_needs_no_database_nor_context_processors(caplog):
    # No `db` fixture, so any query raises; a logged fallback would mean the layout failed.
    request = RequestFactory().get("/reports/")
    with caplog.at_level(logging.ERROR, logger="config.errors"):
        page = _in_layout(errors.server_error(request), 500)
    assert caplog.records == []
    assert "Something went wrong" in page


@pytest.mark.django_db
def test_a_crash_with_the_database_down_answers_the_500_page(monkeypatch):
    class DownConnection:
        vendor = "down"

        def cursor(self):
            raise OperationalError("could not connect to server")

    monkeypatch.setattr(config_views, "connection", DownConnection())
    client = Client(raise_request_exception=False)
    page = _in_layout(client.get("/healthz"), 500)
    assert "could not answer this request" in page


@pytest.mark.django_db
def test_api_paths_keep_djangos_own_error_rendering(client):
    response = client.get("/api/no-such-endpoint/")
    assert response.status_code == 404
    assert LAYOUT not in response.content.decode()


# --- a mistyped study leads somewhere: the studies the visitor may open, with links ----------


def _study_links(page: str) -> list[tuple[str, str]]:
    listed = re.search(r'<ul class="study-list" id="studies-you-may-open">(.*?)</ul>', page, re.S)
    assert listed, "no list of studies on the page"
    return re.findall(r'<a href="([^"]+)">([^<]+)</a>', listed.group(1))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("?study=welth", "There is no study &#x27;welth&#x27;."),
        ("?study=gender&detector=nope", "No detector &#x27;nope&#x27; in study Gender study."),
    ],
)
def test_a_mistyped_report_filter_is_a_400_in_the_layout_listing_the_studies(
    researcher, client_for, study, query, reason
):
    StudyFactory(name="Another study", slug="another")
    page = _in_layout(client_for(researcher).get(reverse("reports:overview") + query), 400)
    assert reason in page
    assert _study_links(page) == [
        ("/reports/?study=another", "Another study"),
        ("/reports/?study=gender", "Gender study"),
    ]


@pytest.mark.django_db
def test_a_mistyped_report_filter_is_the_400_page_in_development_too(researcher, client_for, study, settings):
    settings.DEBUG = True
    page = _in_layout(client_for(researcher).get(reverse("reports:overview") + "?study=welth"), 400)
    assert "There is no study &#x27;welth&#x27;." in page
    assert "Traceback" not in page


@pytest.mark.django_db
def test_a_study_an_annotator_does_not_label_is_no_such_study_whether_it_exists_or_not(
    annotator_c, client_for, study
):
    # Cleo labels "Her study" only; "gender" exists, "welth" does not: the same answer for both,
    # so that the page does not tell her which studies exist.
    own = StudyFactory(name="Her study", slug="hers")
    own.annotators.add(annotator_c)
    client = client_for(annotator_c)
    pages = {}
    for slug in ("gender", "welth"):
        pages[slug] = _in_layout(client.get(reverse("annotate:label_study", args=[slug])), 404)
        assert f"There is no study &#x27;{slug}&#x27; for you to label." in pages[slug]
        assert _study_links(pages[slug]) == [(reverse("annotate:label_study", args=["hers"]), "Her study")]
    shown = {
        slug: re.search(r'<section class="narrow error-page">.*?</section>', page, re.S).group(0)
        for slug, page in pages.items()
    }
    assert shown["gender"].replace("gender", "welth") == shown["welth"]
    assert "Gender study" not in pages["gender"]


@pytest.mark.django_db
def test_an_unknown_study_on_a_researcher_page_is_named(researcher, client_for, study):
    page = _in_layout(client_for(researcher).get(reverse("annotate:agreement", args=["welth"])), 404)
    assert "There is no study &#x27;welth&#x27;." in page
    assert _study_links(page) == [("/reports/?study=gender", "Gender study")]


TECHNICAL_404 = "Using the URLconf defined in"


@pytest.mark.django_db
@pytest.mark.parametrize("friendly", [False, True])
def test_in_development_friendly_errors_answer_a_mistyped_address_with_the_site_404(
    annotator_a, client_for, study, settings, friendly
):
    settings.DEBUG = True
    settings.BIASLAB_FRIENDLY_ERRORS = friendly
    client = client_for(annotator_a)
    mistyped = client.get("/annotate/gender/lable/")  # no URL pattern matches
    missing = client.get(reverse("annotate:label_study", args=["welth"]))  # the view's Http404
    assert mistyped.status_code == missing.status_code == 404
    if not friendly:  # Django's technical page, which lists the URL patterns (development)
        assert TECHNICAL_404 in mistyped.content.decode()
        return
    for response in (mistyped, missing):
        page = _in_layout(response, 404)
        assert TECHNICAL_404 not in page
        assert _study_links(page) == [(reverse("annotate:label_study", args=["gender"]), "Gender study")]
    assert "There is no study &#x27;welth&#x27; for you to label." in missing.content.decode()
