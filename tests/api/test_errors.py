"""One JSON error shape for every /api/ error, whatever was asked for; 405 before anyone is
authenticated; HTML never, not even Django's DEBUG pages."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from annotate import selectors
from annotate.models import Label
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "path",
    [
        "/api/labels/abc/",  # an id that is not a number: no URL pattern matches
        "/api/items/0/",  # ids start at 1
        "/api/items/99999999999999999999/",  # past a 64-bit key: no match, not a database overflow
        "/api/images/-3/",
        "/api/no-such-endpoint/",
        "/api/",
    ],
)
def test_an_unknown_api_path_is_a_json_404_in_debug_too(settings, researcher, api_for, path, debug):
    settings.DEBUG = debug
    body = assert_error(api_for(researcher).get(path), 404, "not_found")
    assert "/api/schema/" in body["detail"]
    assert "URLconf" not in body["detail"]  # Django's technical 404 lists every pattern


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_id_is_a_json_404(settings, researcher, api_for, debug):
    settings.DEBUG = debug
    for path in ("/api/items/123456/", "/api/labels/123456/", "/api/disputes/123456/"):
        assert_error(api_for(researcher).get(path), 404, "not_found")


@pytest.mark.parametrize("who", ["anonymous", "annotator_a", "researcher"])
@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("trace", "/api/studies/", "GET, OPTIONS, HEAD"),
        ("put", "/api/predictions/", "GET, OPTIONS, HEAD"),
        ("delete", "/api/agreement/", "GET, OPTIONS, HEAD"),
        ("get", "/api/token/", "POST, OPTIONS"),
        ("delete", "/api/labels/1/", "GET, PUT, PATCH, OPTIONS, HEAD"),
        ("get", "/api/disputes/1/resolve/", "POST, OPTIONS"),
    ],
)
def test_an_undeclared_method_is_405_for_everyone_before_any_permission_check(
    request, api_for, who, method, path, allow
):
    client = api_for(None if who == "anonymous" else request.getfixturevalue(who))
    response = client.generic(method.upper(), path)
    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"] == allow


def test_anonymous_requests_are_401_with_a_token_challenge_and_the_shape(db, api_for):
    response = api_for(None).get("/api/studies/")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"
    response = APIClient().get("/api/studies/", HTTP_AUTHORIZATION="Token not-a-token")
    assert_error(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"] == "Token"


def test_a_session_still_logs_in_to_the_api_after_the_token_class(researcher):
    client = APIClient()
    client.force_login(researcher)
    assert client.get("/api/studies/").status_code == 200


def test_a_role_that_may_not_is_403_with_the_shape(annotator_a, api_for):
    body = assert_error(
        api_for(annotator_a).get("/api/items/", {"study": "gender"}), 403, "permission_denied"
    )
    assert "researchers" in body["detail"]


def test_a_validation_error_names_each_field_with_dotted_paths(study, items, annotator_a, api_for):
    client = api_for(annotator_a)
    client.get(f"/api/studies/{study.slug}/next/")
    response = client.post("/api/labels/", {"item": items[0].pk, "answers": {"gender": 3}})
    body = assert_error(response, 400, "invalid")
    assert list(body["errors"]) == ["answers.gender"]
    assert body["detail"].startswith("answers.gender: ")
    assert not Label.objects.exists()


def test_a_domain_error_has_its_own_code_and_names_the_field(study, items, researcher, api_for):
    body = assert_error(
        api_for(researcher).get("/api/items/", {"study": "gender", "t2i_model": "nope"}),
        400,
        "unknown_filter",
    )
    assert list(body["errors"]) == ["t2i_model"]
    assert "sdxl" in body["detail"]


def test_a_conflict_is_409_with_the_shape(study, items, annotator_a, api_for):
    client = api_for(annotator_a)
    item = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    assert client.post("/api/labels/", {"item": item, "value": "male"}).status_code == 201
    assert_error(client.post("/api/labels/", {"item": item, "value": "female"}), 409, "conflict")


@pytest.mark.parametrize("accept", [None, "text/csv", "text/html"])
def test_an_error_of_the_csv_export_is_json_not_csv(researcher, api_for, accept):
    headers = {"HTTP_ACCEPT": accept} if accept else {}
    for query in ({"format": "csv"}, {"format": "csv", "study": "nope"}, {"format": "xml", "study": "x"}):
        response = api_for(researcher).get("/api/ground-truth/", query, **headers)
        assert response.status_code in (400, 404, 406)  # 406: ?format=csv with Accept: text/html
        body = assert_error(response, response.status_code)
        assert "ErrorDetail" not in body["detail"]


def test_a_form_post_is_415(study, items, annotator_a, api_for):
    client = api_for(annotator_a)
    response = client.post("/api/labels/", {"item": items[0].pk, "value": "male"}, format="multipart")
    assert_error(response, 415, "unsupported_media_type")


def test_malformed_json_is_400(annotator_a, api_for):
    response = api_for(annotator_a).post("/api/labels/", "{", content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_an_accept_header_nothing_matches_is_406(researcher, api_for):
    assert_error(api_for(researcher).get("/api/studies/", HTTP_ACCEPT="image/png"), 406, "not_acceptable")


def test_too_many_requests_is_429_with_retry_after(settings, researcher, api_for):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "2/minute"},
    }
    client = api_for(researcher)
    for _ in range(2):
        assert client.get("/api/detector-runs/").status_code == 200
    response = client.get("/api/detector-runs/")
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0


@pytest.mark.parametrize("debug", [False, True])
def test_a_server_error_is_a_json_500_and_still_logged(
    settings, monkeypatch, study, researcher, caplog, debug
):
    settings.DEBUG = debug

    def broken(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(selectors, "dispute_queue", broken)
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    body = assert_error(client.get("/api/disputes/", {"study": "gender"}), 500, "server_error")
    assert "disk on fire" not in body["detail"]  # the reason goes to the log, not to the client
    assert any("disk on fire" in str(record.exc_info) for record in caplog.records if record.exc_info)


def test_pages_outside_the_api_keep_their_html_errors(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
