"""Strict input: the JSON types the schema states and nothing else, no field silently dropped,
query parameters given once and not empty. Each refused request writes nothing."""

from __future__ import annotations

import pytest

from annotate.models import FinalLabel, Label
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def seat(study, items, annotator_a, api_for):
    """Annotator A's client and the item they hold a seat on."""
    client = api_for(annotator_a)
    return client, client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"value": "other", "reason": 42}, "reason"),  # was stored as "42"
        ({"value": 1}, "value"),
        ({"value": True}, "value"),
        ({"value": None}, "value"),
        ({"value": ["male"]}, "value"),
        ({"value": "male", "question": 7}, "question"),
        ({"value": "male", "duration_ms": "850"}, "duration_ms"),
        ({"value": "male", "duration_ms": 850.0}, "duration_ms"),
        ({"value": "male", "duration_ms": True}, "duration_ms"),
        ({"value": "male", "duration_ms": -1}, "duration_ms"),
        ({"value": "male", "duration_ms": 2**31}, "duration_ms"),
        ({"value": "male", "request_id": 5}, "request_id"),
        ({"value": "male\x00"}, "value"),
    ],
)
def test_a_wrong_json_type_is_refused_and_nothing_is_stored(seat, body, field):
    client, item = seat
    response = client.post("/api/labels/", {"item": item, **body})
    assert field in assert_error(response, 400, "invalid")["errors"]
    assert not Label.objects.exists()


@pytest.mark.parametrize("item", ["1", 1.0, True, None, 0, 2**63])
def test_an_item_id_must_be_a_json_integer_from_1(seat, item):
    client, _ = seat
    assert "item" in assert_error(client.post("/api/labels/", {"item": item, "value": "male"}), 400)["errors"]


def test_an_unknown_field_is_refused_rather_than_dropped(seat):
    client, item = seat
    response = client.post("/api/labels/", {"item": item, "value": "other", "reasn": "a doll"})
    body = assert_error(response, 400, "invalid")
    assert list(body["errors"]) == ["reasn"]
    assert not Label.objects.exists()


def test_item_and_its_old_name_image_together_are_refused(seat):
    client, item = seat
    response = client.post("/api/labels/", {"item": item, "image": item, "value": "male"})
    assert "image" in assert_error(response, 400)["errors"]
    assert client.post("/api/labels/", {"image": item, "value": "male"}).status_code == 201


def test_value_and_answers_together_are_refused(seat):
    client, item = seat
    response = client.post("/api/labels/", {"item": item, "answers": {"gender": "male"}, "value": "male"})
    assert "value" in assert_error(response, 400)["errors"]
    assert not Label.objects.exists()


@pytest.mark.parametrize("answers", [{}, [], "male", {"gender": 1}, {"gender": None}])
def test_answers_must_be_a_non_empty_object_of_strings(seat, answers):
    client, item = seat
    assert_error(client.post("/api/labels/", {"item": item, "answers": answers}), 400, "invalid")
    assert not Label.objects.exists()


@pytest.mark.parametrize("body", [{}, [], "male", 3])
def test_a_body_that_is_not_an_object_with_the_required_fields_is_refused(seat, body):
    client, _ = seat
    assert_error(client.post("/api/labels/", body), 400, "invalid")


def test_a_label_change_is_strict_too(seat):
    client, item = seat
    label = client.post("/api/labels/", {"item": item, "value": "male"}).json()["id"]
    for body in ({"value": 2}, {"value": "female", "note": "x"}, {"reason": 5}):
        assert_error(client.patch(f"/api/labels/{label}/", body), 400, "invalid")
    assert_error(client.put(f"/api/labels/{label}/", {}), 400, "invalid")  # PUT replaces: value needed
    assert Label.objects.get().value == "male"


def test_patch_changes_only_what_it_names(seat):
    client, item = seat
    label = client.post("/api/labels/", {"item": item, "value": "other", "reason": "a doll"}).json()["id"]
    assert client.patch(f"/api/labels/{label}/", {}).json()["reason"] == "a doll"
    changed = client.patch(f"/api/labels/{label}/", {"reason": "a statue"}).json()
    assert (changed["value"], changed["reason"]) == ("other", "a statue")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"value": "male", "unresolvable": "true"}, "unresolvable"),
        ({"unresolvable": 1}, "value"),  # not true: the body is the value form, which needs one
        ({"value": "male", "unresolvable": True}, "value"),
        ({"value": 5}, "value"),
        ({"value": "male", "note": 3}, "note"),
        ({"value": "male", "notes": "x"}, "notes"),
        ({}, "value"),
    ],
)
def test_resolving_is_strict(study, items, researcher, api_for, body, field):
    response = api_for(researcher).post(f"/api/disputes/{items[0].pk}/resolve/", body)
    assert field in assert_error(response, 400, "invalid")["errors"]
    assert not FinalLabel.objects.exists()


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/api/labels/", "page=", "page"),
        ("/api/labels/", "page=0", "page"),
        ("/api/labels/", "page=last", "page"),
        ("/api/labels/", "page=1.0", "page"),
        ("/api/labels/", "page=1&page=2", "page"),
        ("/api/labels/", "item=", "item"),
        ("/api/labels/", "item=abc", "item"),
        ("/api/labels/", "item=99999999999999999999", "item"),
        ("/api/labels/", "study=", "study"),
        ("/api/items/", "study=", "study"),
        ("/api/items/", "study=gender&study=other", "study"),
        ("/api/items/", "study=gender&state=", "state"),
        ("/api/items/", "study=gender&state=finished", "state"),
        ("/api/items/", "study=not a slug", "study"),
        ("/api/agreement/", "study=gender&question=", "question"),
        ("/api/ground-truth/", "study=gender&format=", "format"),
        ("/api/disputes/", "", "study"),
        ("/api/predictions/", "study=", "study"),
    ],
)
def test_query_parameters_are_given_once_and_not_empty(study, researcher, api_for, path, query, field):
    body = assert_error(api_for(researcher).get(f"{path}?{query}"), 400)
    assert field in body["errors"], body


def test_free_text_filters_may_be_empty(study, items, researcher, api_for):
    client = api_for(researcher)
    response = client.get("/api/items/?study=gender&t2i_model=&category=&q=")
    assert response.status_code == 200
    assert response.json()["count"] == 3
    assert client.get("/api/predictions/?detector=&version=&t2i_model=").status_code == 200


def test_a_page_past_the_last_is_404(study, items, researcher, api_for):
    assert_error(api_for(researcher).get("/api/items/?study=gender&page=2"), 404, "not_found")
    assert api_for(researcher).get("/api/items/?study=gender&page=1").status_code == 200
