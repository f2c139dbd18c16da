"""A JSON body nested deeper or larger than stored JSON may be (``studies.jsonbounds``) is a 400
saying so, on every endpoint: today 5,000 levels end in a RecursionError and a 500 ("Bad input"). Nothing is stored."""

from __future__ import annotations

import pytest

from annotate.models import Label
from studies.jsonbounds import MAX_JSON_BYTES, MAX_JSON_DEPTH
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def seat(study, items, annotator_a, api_for):
    client = api_for(annotator_a)
    return client, client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]


@pytest.mark.parametrize(
    "deep", ['{"a": ' * 5_000 + '""' + "}" * 5_000, "[" * 100_000 + "]" * 100_000], ids=["5000", "100000"]
)
def test_a_body_nested_thousands_deep_is_a_400_not_a_500(seat, deep):
    client, item = seat
    body = f'{{"item": {item}, "answers": {{"gender": "male"}}, "reasons": {deep}}}'
    response = client.post("/api/labels/", body, content_type="application/json")
    detail = assert_error(response, 400, "parse_error")["detail"]
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in detail
    assert not Label.objects.exists()


def test_a_body_larger_than_the_bound_is_a_400(seat):
    client, item = seat
    body = f'{{"item": {item}, "value": "other", "reason": "{"x" * MAX_JSON_BYTES}"}}'
    response = client.post("/api/labels/", body, content_type="application/json")
    assert f"larger than {MAX_JSON_BYTES} bytes" in assert_error(response, 400, "parse_error")["detail"]
    assert not Label.objects.exists()


def test_the_token_endpoint_bounds_its_body_too(client):
    body = "[" * 5_000 + "]" * 5_000
    response = client.post("/api/token/", body, content_type="application/json")
    assert response.status_code == 400
    assert "nested deeper" in response.json()["detail"]


def test_a_body_within_the_bounds_is_read_as_before(seat):
    client, item = seat
    response = client.post("/api/labels/", {"item": item, "value": "male"}, content_type="application/json")
    assert response.status_code == 201
