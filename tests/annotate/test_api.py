"""The REST API: what each persona may do, and the permission matrix for every verb."""

from __future__ import annotations

import csv
import io

import pytest
from rest_framework.test import APIClient

from annotate import services
from annotate.models import Label
from tests.factories import PASSWORD, ImageFactory, PromptFactory

VERBS = ["get", "post", "put", "patch", "delete"]


def api_for(user) -> APIClient:
    client = APIClient()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def label_everything(study, annotator, value="male"):
    """Label every image the annotator can get, through the services."""
    labels = []
    while queue := services.assignment_queue(study=study, annotator=annotator, size=1):
        labels.append(services.annotation_submit(image=queue[0].image, annotator=annotator, value=value))
    return labels


@pytest.fixture
def images(study):
    prompt = PromptFactory(study=study)
    return [ImageFactory(prompt=prompt) for _ in range(3)]


@pytest.fixture
def disputed(study, images, annotator_a, annotator_b):
    """A labelled everything male, B labelled everything female: three disputes."""
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "female")
    return images


def test_annotator_gets_next_image_without_prompt_or_other_labels(study, images, annotator_a):
    response = api_for(annotator_a).get(f"/api/studies/{study.slug}/next/")
    assert response.status_code == 200
    body = response.json()
    assert body["image"] == images[0].pk
    assert body["prompt"] is None  # hidden by default: it could prime the annotator
    assert [item["value"] for item in body["label_set"]] == ["male", "female", "low_quality", "other"]
    assert body["preload"] == [images[1].url]
    assert body["remaining"] >= 1


def test_annotator_submits_a_label_and_a_retried_request_is_stored_once(study, images, annotator_a):
    client = api_for(annotator_a)
    image_id = client.get(f"/api/studies/{study.slug}/next/").json()["image"]
    payload = {"image": image_id, "value": "female", "duration_ms": 850, "request_id": "abc-1"}
    first = client.post("/api/labels/", payload, format="json")
    second = client.post("/api/labels/", payload, format="json")
    assert first.status_code == 201, first.content
    assert second.status_code == 201
    assert Label.objects.filter(image_id=image_id, annotator=annotator_a).count() == 1
    assert Label.objects.get(image_id=image_id).duration_ms == 850


def test_unknown_label_value_is_refused_with_the_valid_values(study, images, annotator_a):
    client = api_for(annotator_a)
    image_id = client.get(f"/api/studies/{study.slug}/next/").json()["image"]
    response = client.post("/api/labels/", {"image": image_id, "value": "cat"}, format="json")
    assert response.status_code == 400
    assert "male" in response.json()["detail"]
    assert not Label.objects.exists()


def test_annotator_cannot_label_an_image_they_were_not_given(study, images, annotator_a):
    response = api_for(annotator_a).post(
        "/api/labels/", {"image": images[2].pk, "value": "male"}, format="json"
    )
    assert response.status_code == 404
    assert not Label.objects.exists()


def test_stale_label_after_resolution_gets_a_conflict(study, disputed, annotator_a, researcher):
    image = disputed[0]
    services.dispute_resolve(image=image, researcher=researcher, value="male", note="clear face")
    own = Label.objects.get(image=image, annotator=annotator_a)
    response = api_for(annotator_a).put(f"/api/labels/{own.pk}/", {"value": "female"}, format="json")
    assert response.status_code == 409
    own.refresh_from_db()
    assert own.value == "male"


@pytest.mark.parametrize("verb", VERBS)
def test_annotator_asking_for_another_annotators_label_gets_404(
    verb, study, disputed, annotator_a, annotator_b
):
    other = Label.objects.filter(annotator=annotator_b).first()
    response = getattr(api_for(annotator_a), verb)(
        f"/api/labels/{other.pk}/", {"value": "male"}, format="json"
    )
    assert response.status_code == 404
    other.refresh_from_db()
    assert other.value == "female"


def test_annotator_lists_only_their_own_labels(study, disputed, annotator_a):
    body = api_for(annotator_a).get("/api/labels/").json()
    assert body["count"] == 3
    assert {row["annotator"] for row in body["results"]} == {"anna"}


RESEARCHER_ENDPOINTS = [
    "/api/images/?study=gender",
    "/api/images/{image}/",
    "/api/disputes/?study=gender",
    "/api/disputes/{image}/",
    "/api/disputes/{image}/resolve/",
    "/api/agreement/?study=gender",
    "/api/ground-truth/?study=gender",
]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("endpoint", RESEARCHER_ENDPOINTS)
@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
def test_researcher_endpoints_refuse_annotators_and_outsiders_for_every_verb(
    request, persona, endpoint, verb, disputed
):
    user = request.getfixturevalue(persona)
    url = endpoint.format(image=disputed[0].pk)
    response = getattr(api_for(user), verb)(url, {"value": "male"}, format="json")
    assert response.status_code == 403
    assert not disputed[0].__class__.objects.filter(final_label__isnull=False).exists()


@pytest.mark.parametrize("endpoint", ["/api/studies/", "/api/labels/", *RESEARCHER_ENDPOINTS])
def test_anonymous_clients_are_refused(endpoint, disputed):
    response = APIClient().get(endpoint.format(image=disputed[0].pk))
    assert response.status_code in (401, 403)


def test_outsider_without_role_cannot_ask_for_work(study, images, outsider):
    assert api_for(outsider).get(f"/api/studies/{study.slug}/next/").status_code == 403
    assert api_for(outsider).post("/api/labels/", {"image": images[0].pk, "value": "male"}).status_code == 403


def test_annotator_not_on_the_study_gets_404_for_its_work(study, images, annotator_c):
    assert api_for(annotator_c).get(f"/api/studies/{study.slug}/next/").status_code == 404


def test_researcher_sees_the_dispute_queue_with_both_labels_and_who_gave_them(disputed, researcher):
    body = api_for(researcher).get("/api/disputes/?study=gender").json()
    assert len(body) == 3
    assert {(row["annotator"], row["value"]) for row in body[0]["labels"]} == {
        ("anna", "male"),
        ("ben", "female"),
    }


def test_researcher_resolves_a_dispute_and_the_unresolvable_rule(disputed, researcher):
    client = api_for(researcher)
    first = client.post(
        f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "female", "note": "<b>hair</b>"}
    )
    assert first.status_code == 200, first.content
    assert first.json()["value"] == "female"
    assert first.json()["decided_by"] == "rita"
    second = client.post(f"/api/disputes/{disputed[1].pk}/resolve/", {"unresolvable": True}, format="json")
    assert second.json()["value"] == "low_quality"
    both = client.post(f"/api/disputes/{disputed[2].pk}/resolve/", {"value": "male", "unresolvable": True})
    assert both.status_code == 400


def test_resolving_with_an_unknown_label_changes_nothing(disputed, researcher):
    response = api_for(researcher).post(f"/api/disputes/{disputed[0].pk}/resolve/", {"value": "robot"})
    assert response.status_code == 400
    disputed[0].refresh_from_db()
    assert not hasattr(disputed[0], "final_label") or disputed[0].final_label is None


def test_researcher_reads_agreement(disputed, researcher):
    body = api_for(researcher).get("/api/agreement/?study=gender").json()
    assert body["n_images"] == 3
    assert body["observed_agreement"] == 0.0


def test_ground_truth_exports_as_json_and_csv(study, images, annotator_a, annotator_b, researcher):
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "male")
    client = api_for(researcher)
    rows = client.get("/api/ground-truth/?study=gender").json()
    assert [row["final_label"] for row in rows] == ["male"] * 3
    response = client.get("/api/ground-truth/?study=gender&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["image"] for row in parsed] == [image.source_path for image in images]


def test_token_authentication_works_for_scripts(study, images, annotator_a):
    token = APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD}).json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(f"/api/studies/{study.slug}/next/").status_code == 200


def test_openapi_schema_describes_the_endpoints(researcher):
    response = api_for(researcher).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    text = response.content.decode()
    assert "/api/labels/" in text
    assert "/api/disputes/{id}/resolve/" in text


def test_ground_truth_asked_for_by_accept_header_is_the_csv_file(study, images, researcher):
    response = api_for(researcher).get("/api/ground-truth/?study=gender", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["image"] for row in parsed] == [image.source_path for image in images]


@pytest.mark.parametrize("url", ["/api/images/", "/api/disputes/"])
def test_images_and_disputes_without_a_study_say_which_parameter_is_missing(study, researcher, url):
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
    assert client.get("/api/images/?study=gender&state=disputed").json()["count"] == 3


def test_label_for_an_image_not_assigned_says_so(study, images, annotator_a):
    response = api_for(annotator_a).post(
        "/api/labels/", {"image": images[2].pk, "value": "male"}, format="json"
    )
    assert response.status_code == 404
    assert "not one of the images assigned to you" in response.json()["detail"]


def test_the_schema_lists_every_endpoint_whoever_asks(researcher, annotator_a):
    for user in (researcher, annotator_a):
        text = (
            api_for(user).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content.decode()
        )
        assert "/api/studies/{slug}/next/" in text
        assert "/api/disputes/" in text


def test_the_dispute_queue_costs_the_same_queries_for_three_or_thirty_disputes(
    study, annotator_a, annotator_b, researcher, django_assert_max_num_queries
):
    prompt = PromptFactory(study=study)
    for _ in range(30):
        ImageFactory(prompt=prompt)
    label_everything(study, annotator_a, "male")
    label_everything(study, annotator_b, "female")
    client = api_for(researcher)
    with django_assert_max_num_queries(8):
        body = client.get("/api/disputes/?study=gender").json()
    assert len(body) == 30
    assert all(len(row["labels"]) == 2 for row in body)
