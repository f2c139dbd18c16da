"""The REST API: every endpoint's successful path for each role that may use it, the old keys
that scripts rely on, multi-question items, and the permission matrix for every verb."""

from __future__ import annotations

import csv
import io

import pytest
from rest_framework.test import APIClient

from annotate import services
from annotate.models import FinalLabel, Label
from annotate.services import locks
from studies.models import Item
from tests.annotate.gender import submit
from tests.factories import (
    PASSWORD,
    ItemFactory,
    PairItemFactory,
    PromptFactory,
    StudyFactory,
    image_of,
)

VERBS = ["get", "post", "put", "patch", "delete"]


def api_for(user) -> APIClient:
    """A client logged in as ``user`` that sends JSON bodies (the API takes no form posts)."""
    client = APIClient()
    client.default_format = "json"
    assert client.login(username=user.username, password=PASSWORD)
    return client


def label_everything(study, annotator, value="male"):
    """Label every item the annotator can get with one gender answer, through the services."""
    labels = []
    while queue := services.assignment_queue(study=study, annotator=annotator, size=1):
        labels.append(submit(item=queue[0].item, annotator=annotator, value=value))
    return labels


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study)
    return [ItemFactory(prompt=prompt) for _ in range(3)]


@pytest.fixture
def disputed(study, items, annotator_a, annotator_b):
    """A labelled everything male, B labelled everything female: three disputes."""
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "female")
    return items


@pytest.fixture
def pair_study(annotator_a, annotator_b):
    study = StudyFactory(name="Pairs", slug="pairs", protocol="pair_change")
    study.annotators.add(annotator_a, annotator_b)
    prompt = PromptFactory(study=study)
    return study, [PairItemFactory(prompt=prompt) for _ in range(2)]


PAIR_ANSWERS = {"age": "older", "gender": "male_female", "skin": "same"}


# --- studies and questions ----------------------------------------------------------------------


def test_annotator_lists_their_studies_with_questions_and_the_old_keys(study, annotator_a, annotator_c):
    StudyFactory(slug="not-mine")
    body = api_for(annotator_a).get("/api/studies/").json()
    assert [row["slug"] for row in body] == ["gender"]
    row = body[0]
    assert row["protocol"] == "gender"
    assert [q["key"] for q in row["questions"]] == ["gender"]
    assert [c["value"] for c in row["questions"][0]["choices"]] == ["male", "female", "low_quality", "other"]
    assert [c["value"] for c in row["label_set"]] == ["male", "female", "low_quality", "other"]
    assert row["labels_per_item"] == row["labels_per_image"] == 2
    assert api_for(annotator_c).get("/api/studies/").json() == []


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_list_every_study(request, persona, study, pair_study):
    body = api_for(request.getfixturevalue(persona)).get("/api/studies/").json()
    assert {row["slug"] for row in body} == {"gender", "pairs"}
    pairs = next(row for row in body if row["slug"] == "pairs")
    assert pairs["label_set"] is None  # three questions: no single label set
    assert [q["key"] for q in pairs["questions"]] == ["age", "gender", "skin"]


@pytest.mark.parametrize("persona", ["annotator_a", "researcher"])
def test_questions_of_a_study_with_their_choices_and_keys(request, persona, study):
    StudyFactory(slug="attrs", protocol="attributes").annotators.add(request.getfixturevalue("annotator_a"))
    body = api_for(request.getfixturevalue(persona)).get("/api/questions/?study=attrs").json()
    assert len(body) == 15
    boots = body[0]
    assert (boots["key"], boots["kind"], boots["hotkey"], boots["default_value"]) == (
        "boots",
        "toggle",
        "b",
        "no",
    )
    assert [c["value"] for c in boots["choices"]] == ["yes", "no"]


def test_questions_are_404_for_an_annotator_not_on_the_study_and_403_without_a_role(
    study, annotator_c, outsider
):
    assert api_for(annotator_c).get("/api/questions/?study=gender").status_code == 404
    assert api_for(outsider).get("/api/questions/?study=gender").status_code == 403
    response = api_for(annotator_c).get("/api/questions/")
    assert response.status_code == 400
    assert "?study=<slug>" in response.json()["detail"]


# --- labeling -------------------------------------------------------------------------------------


def test_annotator_gets_next_item_with_images_questions_and_progress_but_no_prompt(study, items, annotator_a):
    response = api_for(annotator_a).get(f"/api/studies/{study.slug}/next/")
    assert response.status_code == 200
    body = response.json()
    assert body["item"]["id"] == body["image"] == items[0].pk
    assert body["item"]["prompt"] is None  # hidden by default: it could prime the annotator
    assert body["prompt"] is None
    assert body["item"]["images"] == [
        {
            "role": "image",
            "url": image_of(items[0]).url,
            "width": 32,
            "height": 32,
            "source_path": items[0].key,
        }
    ]
    assert body["url"] == image_of(items[0]).url
    assert [q["key"] for q in body["item"]["questions"]] == ["gender"]
    assert [c["value"] for c in body["label_set"]] == ["male", "female", "low_quality", "other"]
    assert [row["id"] for row in body["queue"]] == [items[1].pk]
    assert body["preload"] == [image_of(items[1]).url]
    assert (body["done"], body["remaining"]) == (0, 3)


def test_next_pair_has_both_images_by_role_and_three_questions(pair_study, annotator_a):
    study, _pairs = pair_study
    body = api_for(annotator_a).get(f"/api/studies/{study.slug}/next/").json()
    assert [row["role"] for row in body["item"]["images"]] == ["input", "output"]
    assert [q["key"] for q in body["item"]["questions"]] == ["age", "gender", "skin"]
    assert body["label_set"] is None
    assert len(body["preload"]) == 2  # the next pair's seed and edit


def test_next_when_no_work_is_left(study, annotator_a):
    body = api_for(annotator_a).get(f"/api/studies/{study.slug}/next/").json()
    assert body["item"] is None
    assert body["image"] is None
    assert body["queue"] == []


def test_annotator_submits_an_answer_and_a_retried_request_is_stored_once(study, items, annotator_a):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    payload = {
        "item": item_id,
        "question": "gender",
        "value": "female",
        "duration_ms": 850,
        "request_id": "abc-1",
    }
    first = client.post("/api/labels/", payload, format="json")
    second = client.post("/api/labels/", payload, format="json")
    assert first.status_code == 201, first.content
    assert second.status_code == 201
    body = first.json()
    assert (body["item"], body["image"], body["question"], body["value"], body["display"]) == (
        item_id,
        item_id,
        "gender",
        "female",
        "Female",
    )
    assert Label.objects.filter(item_id=item_id, annotator=annotator_a).count() == 1
    assert Label.objects.get(item_id=item_id).duration_ms == 850


def test_the_old_image_field_and_a_missing_question_work_for_one_question_items(study, items, annotator_a):
    client = api_for(annotator_a)
    image_id = client.get(f"/api/studies/{study.slug}/next/").json()["image"]
    response = client.post(
        "/api/labels/", {"image": image_id, "value": "other", "reason": "a doll"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert (response.json()["question"], response.json()["reason"]) == ("gender", "a doll")


def test_annotator_submits_every_answer_of_a_pair_at_once(pair_study, annotator_a):
    study, pairs = pair_study
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    response = client.post("/api/labels/", {"item": item_id, "answers": PAIR_ANSWERS}, format="json")
    assert response.status_code == 201, response.content
    assert {row["question"]: row["value"] for row in response.json()} == PAIR_ANSWERS
    one = client.post("/api/labels/", {"item": pairs[1].pk, "value": "older"}, format="json")
    assert one.status_code in (400, 404)


def test_one_answer_of_a_multi_question_item_needs_its_question_and_the_others(pair_study, annotator_a):
    study, _pairs = pair_study
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    unnamed = client.post("/api/labels/", {"item": item_id, "value": "older"}, format="json")
    assert unnamed.status_code == 400
    assert "age, gender, skin" in unnamed.json()["detail"]
    alone = client.post("/api/labels/", {"item": item_id, "question": "age", "value": "older"}, format="json")
    assert alone.status_code == 400
    assert "gender" in alone.json()["detail"]
    assert not Label.objects.exists()


def test_unknown_answer_is_refused_with_the_valid_values(study, items, annotator_a):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    response = client.post("/api/labels/", {"item": item_id, "value": "cat"}, format="json")
    assert response.status_code == 400
    assert "male" in response.json()["detail"]
    assert not Label.objects.exists()


def test_annotator_cannot_label_an_item_they_were_not_given(study, items, annotator_a):
    response = api_for(annotator_a).post(
        "/api/labels/", {"item": items[2].pk, "value": "male"}, format="json"
    )
    assert response.status_code == 404
    assert "not one of the items assigned to you" in response.json()["detail"]
    assert not Label.objects.exists()


def test_a_second_post_with_another_answer_is_a_conflict_not_a_change(study, items, annotator_a):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    client.post("/api/labels/", {"item": item_id, "value": "male"}, format="json")
    response = client.post("/api/labels/", {"item": item_id, "value": "female"}, format="json")
    assert response.status_code == 409
    assert "already labelled" in response.json()["detail"]
    assert Label.objects.get(item_id=item_id).value == "male"


@pytest.mark.parametrize("verb", ["put", "patch"])
def test_annotator_changes_their_own_label(verb, study, items, annotator_a):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    label_id = client.post("/api/labels/", {"item": item_id, "value": "male"}, format="json").json()["id"]
    response = getattr(client, verb)(f"/api/labels/{label_id}/", {"value": "female"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["value"] == "female"
    assert Label.objects.get(pk=label_id).revisions.count() == 2


def test_changing_one_answer_of_a_multi_question_item_keeps_the_others(pair_study, annotator_a):
    study, _pairs = pair_study
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    rows = client.post("/api/labels/", {"item": item_id, "answers": PAIR_ANSWERS}, format="json").json()
    skin = next(row["id"] for row in rows if row["question"] == "skin")
    assert client.patch(f"/api/labels/{skin}/", {"value": "darker"}, format="json").status_code == 200
    stored = dict(Label.objects.filter(item_id=item_id).values_list("question__key", "value"))
    assert stored == {**PAIR_ANSWERS, "skin": "darker"}


def test_stale_label_after_resolution_gets_a_conflict(study, disputed, annotator_a, researcher):
    item = disputed[0]
    api_for(researcher).post(f"/api/disputes/{item.pk}/resolve/", {"value": "male", "note": "clear face"})
    own = Label.objects.get(item=item, annotator=annotator_a)
    response = api_for(annotator_a).put(f"/api/labels/{own.pk}/", {"value": "female"}, format="json")
    assert response.status_code == 409
    own.refresh_from_db()
    assert own.value == "male"


@pytest.mark.parametrize("verb", ["get", "put", "patch"])
def test_annotator_asking_for_another_annotators_label_gets_404(
    verb, study, disputed, annotator_a, annotator_b
):
    other = Label.objects.filter(annotator=annotator_b).first()
    response = getattr(api_for(annotator_a), verb)(f"/api/labels/{other.pk}/", {"value": "male"})
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    other.refresh_from_db()
    assert other.value == "female"


@pytest.mark.parametrize("verb", ["post", "delete"])
def test_labels_are_never_deleted_or_posted_to_by_id_whoever_asks(
    verb, study, disputed, annotator_a, annotator_b
):
    """405 with Allow and a hint, for the owner and anyone else alike: the answer does not
    depend on whose label it is, so it tells nobody whether the id exists."""
    own = Label.objects.filter(annotator=annotator_a).first()
    other = Label.objects.filter(annotator=annotator_b).first()
    for label in (own, other):
        response = getattr(api_for(annotator_a), verb)(f"/api/labels/{label.pk}/")
        assert response.status_code == 405
        assert response["Allow"] == "GET, PUT, PATCH, OPTIONS, HEAD"
        assert response.json()["code"] == "method_not_allowed"
    assert "never deleted" in api_for(annotator_a).delete(f"/api/labels/{own.pk}/").json()["detail"]
    assert Label.objects.count() == 6


def test_annotator_lists_and_reads_only_their_own_labels(study, disputed, annotator_a):
    client = api_for(annotator_a)
    body = client.get("/api/labels/").json()
    assert body["count"] == 3
    assert {row["annotator"] for row in body["results"]} == {"anna"}
    own = body["results"][0]
    assert client.get(f"/api/labels/{own['id']}/").json()["value"] == "male"
    assert client.get(f"/api/labels/?item={own['item']}&question=gender").json()["count"] == 1


def test_researcher_reads_every_label_but_changes_none(study, disputed, researcher, annotator_b):
    client = api_for(researcher)
    body = client.get("/api/labels/?study=gender").json()
    assert body["count"] == 6
    bens = Label.objects.filter(annotator=annotator_b).first()
    assert client.get(f"/api/labels/{bens.pk}/").json()["annotator"] == "ben"
    assert client.put(f"/api/labels/{bens.pk}/", {"value": "male"}, format="json").status_code == 403
    assert (
        client.post("/api/labels/", {"item": disputed[0].pk, "value": "male"}, format="json").status_code
        == 403
    )


# --- items (researchers) --------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/items/", "/api/images/"])
@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_list_items_with_state_and_final_answers(
    request, url, persona, study, disputed, researcher
):
    api_for(researcher).post(f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "female"})
    body = api_for(request.getfixturevalue(persona)).get(f"{url}?study=gender").json()
    assert body["count"] == 3
    first = body["results"][0]
    assert (first["id"], first["key"], first["source_path"]) == (
        disputed[0].pk,
        disputed[0].key,
        disputed[0].key,
    )
    assert (first["state"], first["final_label"], first["final_labels"]) == (
        "resolved",
        "female",
        {"gender": "female"},
    )
    assert first["url"] == image_of(disputed[0]).url
    assert [row["state"] for row in body["results"][1:]] == ["disputed", "disputed"]


@pytest.mark.parametrize("url", ["/api/items/{id}/", "/api/images/{id}/"])
def test_researcher_reads_one_item_with_labels_final_and_history(url, study, disputed, researcher):
    client = api_for(researcher)
    client.post(f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "female", "note": "hair"})
    response = client.get(url.format(id=disputed[0].pk))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "resolved"
    [gender] = body["questions"]
    assert {(row["annotator"], row["display"]) for row in gender["labels"]} == {
        ("anna", "Male"),
        ("ben", "Female"),
    }
    assert gender["final_label"]["value"] == "female"
    assert gender["final_label"]["decided_by"] == "rita"
    assert [row["annotator"] for row in body["label_history"]] == ["anna", "ben"]
    assert body["final_label_history"][-1]["note"] == "hair"


def test_a_pair_item_reads_with_both_images_and_every_question(pair_study, researcher, annotator_a):
    study, pairs = pair_study
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    services.annotation_submit(item=pairs[0], annotator=annotator_a, answers=PAIR_ANSWERS)
    body = api_for(researcher).get(f"/api/items/{pairs[0].pk}/").json()
    assert [row["role"] for row in body["images"]] == ["input", "output"]
    assert [q["key"] for q in body["questions"]] == ["age", "gender", "skin"]
    assert body["state"] == "in_progress"
    assert body["final_label"] is None


def test_items_search_and_filters(study, items, researcher):
    client = api_for(researcher)
    assert client.get(f"/api/items/?study=gender&q={items[1].key}").json()["count"] == 1
    assert client.get("/api/items/?study=gender&state=unlabelled&t2i_model=sdxl").json()["count"] == 3


# --- disputes, agreement, ground truth (researchers) ---------------------------------------------


def test_researcher_sees_the_dispute_queue_with_both_labels_and_who_gave_them(disputed, researcher):
    body = api_for(researcher).get("/api/disputes/?study=gender").json()
    assert len(body) == 3
    row = body[0]
    assert (row["item"], row["image"], row["question"], row["state"]) == (
        disputed[0].pk,
        disputed[0].pk,
        "gender",
        "disputed",
    )
    assert (row["n_labels"], row["n_needed"]) == (2, 2)
    assert {(label["annotator"], label["value"], label["display"]) for label in row["labels"]} == {
        ("anna", "male", "Male"),
        ("ben", "female", "Female"),
    }


def test_researcher_reads_one_dispute(disputed, researcher):
    body = api_for(researcher).get(f"/api/disputes/{disputed[0].pk}/").json()
    assert body["state"] == "disputed"
    assert body["question"] == "gender"
    assert {label["annotator"] for label in body["labels"]} == {"anna", "ben"}
    assert body["questions"][0]["state"] == "disputed"


def test_researcher_resolves_a_dispute_and_the_unresolvable_rule(disputed, researcher):
    client = api_for(researcher)
    first = client.post(
        f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "female", "note": "<b>hair</b>"}
    )
    assert first.status_code == 200, first.content
    assert (first.json()["value"], first.json()["display"], first.json()["question"]) == (
        "female",
        "Female",
        "gender",
    )
    assert first.json()["decided_by"] == "rita"
    second = client.post(f"/api/disputes/{disputed[1].pk}/resolve/", {"unresolvable": True}, format="json")
    assert second.json()["value"] == "low_quality"
    both = client.post(f"/api/disputes/{disputed[2].pk}/resolve/", {"value": "male", "unresolvable": True})
    assert both.status_code == 400


def test_a_pair_dispute_is_resolved_per_question(pair_study, researcher, annotator_a, annotator_b):
    study, pairs = pair_study
    for annotator, skin in ((annotator_a, "darker"), (annotator_b, "lighter")):
        services.assignment_queue(study=study, annotator=annotator, size=1)
        services.annotation_submit(item=pairs[0], annotator=annotator, answers={**PAIR_ANSWERS, "skin": skin})
    client = api_for(researcher)
    rows = client.get("/api/disputes/?study=pairs").json()
    assert [(row["item"], row["question"]) for row in rows] == [(pairs[0].pk, "skin")]
    unnamed = client.post(f"/api/disputes/{pairs[0].pk}/resolve/", {"value": "darker"})
    assert unnamed.status_code == 400
    named = client.post(f"/api/disputes/{pairs[0].pk}/resolve/", {"question": "skin", "value": "darker"})
    assert named.status_code == 200, named.content
    assert FinalLabel.objects.get(item=pairs[0], question__key="skin").value == "darker"
    no_fallback = client.post(
        f"/api/disputes/{pairs[0].pk}/resolve/", {"question": "age", "unresolvable": True}
    )
    assert no_fallback.status_code in (400, 409)


def test_resolving_with_an_unknown_answer_changes_nothing(disputed, researcher):
    response = api_for(researcher).post(f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "robot"})
    assert response.status_code == 400
    assert not FinalLabel.objects.filter(item=disputed[0]).exists()


def test_researcher_reads_agreement_per_question(disputed, researcher):
    client = api_for(researcher)
    body = client.get("/api/agreement/?study=gender").json()
    assert (body["question"], body["n_images"], body["n_items"], body["observed_agreement"]) == (
        "gender",
        3,
        3,
        0.0,
    )
    assert body["label_names"] == ["Male", "Female", "Low quality", "Other"]
    assert client.get("/api/agreement/?study=gender&question=gender").json() == body
    wrong = client.get("/api/agreement/?study=gender&question=boots")
    assert wrong.status_code == 400
    assert "gender" in wrong.json()["detail"]


def test_ground_truth_exports_as_json_and_csv_one_row_per_item_and_question(
    study, items, annotator_a, annotator_b, researcher
):
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "male")
    client = api_for(researcher)
    rows = client.get("/api/ground-truth/?study=gender").json()
    assert [(row["item"], row["question"], row["final_label"]) for row in rows] == [
        (item.key, "gender", "male") for item in items
    ]
    response = client.get("/api/ground-truth/?study=gender&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["image"] for row in parsed] == [item.key for item in items]


def test_ground_truth_asked_for_by_accept_header_is_the_csv_file(study, items, researcher):
    response = api_for(researcher).get("/api/ground-truth/?study=gender", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["item"] for row in parsed] == [item.key for item in items]


# --- permissions ----------------------------------------------------------------------------------

RESEARCHER_ENDPOINTS = [
    "/api/images/?study=gender",
    "/api/images/{item}/",
    "/api/items/?study=gender",
    "/api/items/{item}/",
    "/api/disputes/?study=gender",
    "/api/disputes/{item}/",
    "/api/disputes/{item}/resolve/",
    "/api/agreement/?study=gender",
    "/api/ground-truth/?study=gender",
]


def declared_verb(endpoint: str) -> str:
    return "post" if endpoint.endswith("/resolve/") else "get"


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_researchers_and_admins_get_every_researcher_endpoint(request, persona, disputed):
    client = api_for(request.getfixturevalue(persona))
    for endpoint in RESEARCHER_ENDPOINTS:
        url = endpoint.format(item=disputed[0].pk)
        if url.endswith("/resolve/"):
            response = client.post(url, {"question": "gender", "value": "male"}, format="json")
        else:
            response = client.get(url)
        assert response.status_code == 200, (url, response.content)
    assert client.get("/api/labels/").json()["count"] == 6
    assert len(client.get("/api/questions/?study=gender").json()) == 1


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("endpoint", RESEARCHER_ENDPOINTS)
@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
def test_researcher_endpoints_refuse_annotators_and_outsiders_for_every_verb(
    request, persona, endpoint, verb, disputed
):
    """The endpoint's own verb: 403. Any other: 405, as for a researcher (the method table is
    the same for everyone, so it tells nobody anything about their role)."""
    user = request.getfixturevalue(persona)
    url = endpoint.format(item=disputed[0].pk)
    response = getattr(api_for(user), verb)(url, {"value": "male", "question": "gender"})
    expected = 403 if verb == declared_verb(endpoint) else 405
    assert response.status_code == expected
    assert response.json()["status"] == expected
    assert not FinalLabel.objects.exists()


@pytest.mark.parametrize(
    "endpoint", ["/api/studies/", "/api/labels/", "/api/questions/?study=gender", *RESEARCHER_ENDPOINTS]
)
def test_anonymous_clients_are_refused(endpoint, disputed):
    url = endpoint.format(item=disputed[0].pk)
    response = getattr(APIClient(), declared_verb(endpoint))(url, {"value": "male"}, format="json")
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_outsider_without_role_cannot_ask_for_work(study, items, outsider):
    assert api_for(outsider).get(f"/api/studies/{study.slug}/next/").status_code == 403
    response = api_for(outsider).post("/api/labels/", {"item": items[0].pk, "value": "male"})
    assert response.status_code == 403
    assert api_for(outsider).get("/api/studies/").status_code == 403
    assert api_for(outsider).get("/api/labels/").status_code == 403


def test_annotator_not_on_the_study_gets_404_for_its_work(study, items, annotator_c):
    assert api_for(annotator_c).get(f"/api/studies/{study.slug}/next/").status_code == 404


@pytest.mark.parametrize("body_format", ["json", "multipart"])
def test_token_authentication_works_for_scripts(body_format, study, items, annotator_a):
    """JSON, or a form post as `curl -d` sends it: the one endpoint that takes both."""
    token = (
        APIClient()
        .post("/api/token/", {"username": "anna", "password": PASSWORD}, format=body_format)
        .json()["token"]
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(f"/api/studies/{study.slug}/next/").status_code == 200


def test_wrong_credentials_get_a_400_that_says_so(annotator_a):
    response = APIClient().post("/api/token/", {"username": "anna", "password": "nope"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_credentials"


@pytest.mark.parametrize("url", ["/api/images/", "/api/items/", "/api/disputes/"])
def test_items_and_disputes_without_a_study_say_which_parameter_is_missing(study, researcher, url):
    response = api_for(researcher).get(url)
    assert response.status_code == 400
    assert "?study=<slug>" in response.json()["detail"]
    assert study.slug in response.json()["detail"]


def test_unknown_filters_and_states_get_a_400_naming_what_exists(disputed, researcher):
    client = api_for(researcher)
    response = client.get("/api/images/?study=gender&state=finished")
    assert response.status_code == 400
    assert "disputed" in response.json()["detail"]
    response = client.get("/api/images/?study=gender&t2i_model=nope")
    assert response.status_code == 400
    assert "sdxl" in response.json()["detail"]
    response = client.get("/api/agreement/?study=gender&t2i_model=nope")
    assert response.status_code == 400
    assert "sdxl" in response.json()["detail"]
    assert response.json()["detail"] == "No images of T2I model 'nope' (T2I models: sdxl)."
    response = client.get("/api/agreement/?study=gender&category=nope")
    assert response.status_code == 400
    assert "profession" in response.json()["detail"]
    assert client.get("/api/images/?study=gender&state=disputed").json()["count"] == 3


def test_a_category_filter_names_the_categories_of_the_study_s_images(disputed, study, researcher):
    """A prompt category no image has is refused like a typo, naming the images' categories, on
    the API as in the reports and the agreement command."""
    PromptFactory(study=study, category="place")  # a prompt, but no image of it
    client = api_for(researcher)
    for url in ("/api/images/?study=gender&category=place", "/api/agreement/?study=gender&category=place"):
        response = client.get(url)
        assert response.status_code == 400
        body = response.json()
        assert body["code"] == "unknown_filter"
        assert body["detail"] == "No images of prompt category 'place' (categories: profession)."
    assert client.get("/api/images/?study=gender&category=profession").json()["count"] == 3


def test_the_dispute_queue_costs_the_same_queries_for_three_or_thirty_disputes(
    study, annotator_a, annotator_b, researcher, django_assert_max_num_queries
):
    prompt = PromptFactory(study=study)
    for _ in range(30):
        ItemFactory(prompt=prompt)
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "female")
    client = api_for(researcher)
    with django_assert_max_num_queries(9):
        body = client.get("/api/disputes/?study=gender").json()
    assert len(body) == 30
    assert all(len(row["labels"]) == 2 for row in body)


def test_the_items_list_costs_the_same_queries_for_a_page_of_three_or_fifty(
    study, researcher, django_assert_max_num_queries
):
    prompt = PromptFactory(study=study)
    for _ in range(50):
        ItemFactory(prompt=prompt)
    client = api_for(researcher)
    with django_assert_max_num_queries(10):
        body = client.get("/api/items/?study=gender").json()
    assert len(body["results"]) == 50


# --- labeling and API defects -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": "hair", "value": "older"}, "question"),
        ({"answers": {**PAIR_ANSWERS, "hair": "long"}}, "answers.hair"),
        ({"answers": PAIR_ANSWERS, "reasons": {"hair": "why"}}, "reasons.hair"),
    ],
    ids=["question", "answers", "reasons"],
)
def test_a_question_the_item_does_not_ask_is_unknown_question_naming_the_field(
    pair_study, annotator_a, body, field
):
    """Regression: inside ``answers`` it was ``invalid_answer`` with empty ``errors``."""
    study, _pairs = pair_study
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    response = client.post("/api/labels/", {"item": item_id, **body}, format="json")
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "unknown_question"
    assert list(error["errors"]) == [field]
    assert "hair" in error["detail"]
    assert "age, gender, skin" in error["detail"]
    assert not Label.objects.exists()


def test_a_retry_with_the_same_request_id_and_another_answer_is_a_conflict(study, items, annotator_a):
    """Regression: it answered 201 with the old label, dropping the new answer without a word."""
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    body = {"item": item_id, "value": "male", "request_id": "r1"}
    assert client.post("/api/labels/", body, format="json").status_code == 201
    assert client.post("/api/labels/", body, format="json").status_code == 201  # a true retry
    response = client.post("/api/labels/", {**body, "value": "female"}, format="json")
    assert response.status_code == 409
    assert "already labelled — reload" in response.json()["detail"]
    assert Label.objects.get().value == "male"


def test_a_label_change_does_not_revert_a_change_to_another_answer_made_meanwhile(
    pair_study, annotator_a, monkeypatch
):
    """Lost update: PATCH read the annotator's other answers before locking the item
    and wrote them all back. Here a change to "skin" commits while the PATCH of "age" waits for
    the item lock (the threaded version runs on PostgreSQL in test_concurrency.py)."""
    study, _pairs = pair_study
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    rows = client.post("/api/labels/", {"item": item_id, "answers": PAIR_ANSWERS}, format="json").json()
    ids = {row["question"]: row["id"] for row in rows}
    pending = [lambda: Label.objects.filter(pk=ids["skin"]).update(value="darker")]

    def wrap(lock):
        def locked(*args, **kwargs):
            while pending:
                pending.pop()()  # another writer, holding the lock, commits
            return lock(*args, **kwargs)

        return locked

    monkeypatch.setattr(locks, "lock_item", wrap(locks.lock_item))
    monkeypatch.setattr(locks, "lock_item_for_label", wrap(locks.lock_item_for_label))
    response = client.patch(f"/api/labels/{ids['age']}/", {"value": "younger"}, format="json")
    assert response.status_code == 200, response.content
    stored = dict(Label.objects.filter(item_id=item_id).values_list("question__key", "value"))
    assert stored == {**PAIR_ANSWERS, "age": "younger", "skin": "darker"}


@pytest.mark.parametrize("verb", ["put", "patch"])
def test_changing_other_to_another_answer_drops_the_reason(verb, study, items, annotator_a):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    body = {"item": item_id, "value": "other", "reason": "cartoon, not a photo"}
    label_id = client.post("/api/labels/", body, format="json").json()["id"]
    change = {"value": "female", "reason": "cartoon, not a photo"} if verb == "put" else {"value": "female"}
    response = getattr(client, verb)(f"/api/labels/{label_id}/", change, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["value"], response.json()["reason"]) == ("female", "")


def test_the_history_of_a_broken_agreement_uses_a_source_the_schema_lists(
    study, items, annotator_a, annotator_b, researcher
):
    """Regression: "Agreement broken" entries carried ``source: ""``, outside the schema's enum."""
    for annotator in (annotator_a, annotator_b):
        item_id = api_for(annotator).get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
        api_for(annotator).post("/api/labels/", {"item": item_id, "value": "male"}, format="json")
    own = Label.objects.get(item_id=item_id, annotator=annotator_a)
    api_for(annotator_a).patch(f"/api/labels/{own.pk}/", {"value": "female"}, format="json")
    client = api_for(researcher)
    schema = client.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]
    source = schema["FinalRevision"]["properties"]["source"]
    ref = source.get("$ref") or source["allOf"][0]["$ref"]
    enum = schema[ref.rsplit("/", 1)[-1]]["enum"]
    history = client.get(f"/api/items/{item_id}/").json()["final_label_history"]
    assert [(row["value"], row["source"]) for row in history] == [("male", "agreed"), ("", "agreed")]
    assert "Agreement broken" in history[-1]["note"]
    assert {row["source"] for row in history} <= set(enum)


def test_an_item_removed_while_a_submit_waits_for_its_lock_answers_404(
    study, items, annotator_a, monkeypatch
):
    """remove_items deletes the item between the request's look-up and the service's lock."""
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    real_lock = locks.lock_item_for_label

    def removed_first(**kwargs):
        Item.objects.filter(pk=kwargs["item_id"]).delete()
        return real_lock(**kwargs)

    monkeypatch.setattr(locks, "lock_item_for_label", removed_first)
    response = client.post("/api/labels/", {"item": item_id, "question": "gender", "value": "male"})
    assert response.status_code == 404, response.content
    assert f"Item {item_id} was removed" in response.json()["detail"]


def test_a_label_whose_item_is_removed_while_a_change_waits_answers_404(
    study, items, annotator_a, monkeypatch
):
    client = api_for(annotator_a)
    item_id = client.get(f"/api/studies/{study.slug}/next/").json()["item"]["id"]
    label_id = client.post("/api/labels/", {"item": item_id, "value": "male"}).json()["id"]
    real_lock = locks.lock_item

    def removed_first(item):
        Item.objects.filter(pk=item.pk).delete()
        return real_lock(item)

    monkeypatch.setattr(locks, "lock_item", removed_first)
    response = client.patch(f"/api/labels/{label_id}/", {"value": "female"})
    assert response.status_code == 404, response.content
