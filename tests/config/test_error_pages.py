"""Error pages: in the site's layout with a way back; 403 says who may see what; each renders
when the error comes before any user is loaded, when context processors fail, and (500) with
the database down. /api/ paths keep Django's own rendering."""

from __future__ import annotations

import logging

import pytest
from django.db.utils import OperationalError
from django.test import Client, RequestFactory
from django.urls import reverse

from config import errors
from config import views as config_views

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
