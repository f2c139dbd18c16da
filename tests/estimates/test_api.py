"""The estimates API: sampling rounds (list, draw) and the estimate, for researchers only, with
the same checks and the same numbers as the service and the ``estimate_bias`` command."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from estimates import estimands
from estimates.models import SamplingRound
from studies.models import Item
from tests.api.conftest import assert_error
from tests.factories import StudyFactory

pytestmark = pytest.mark.django_db

ROUNDS = "/api/sampling-rounds/"
ESTIMATES = "/api/estimates/"


def test_a_researcher_draws_a_round_and_lists_it(sampled_study, researcher, api_for):
    client = api_for(researcher)
    response = client.post(ROUNDS, {"study": "gender", "detector": "fake", "budget": 10, "seed": 7})
    assert response.status_code == 201, response.content
    body = response.json()
    stored = SamplingRound.objects.get()
    assert body == {
        "id": stored.pk,
        "study": "gender",
        "number": 1,
        "detector": "fake",
        "detector_version": "1",
        "design": "uniform",
        "seed": 7,
        "budget": 10,
        "n_selected": stored.n_selected,
        "created_at": body["created_at"],
        "created_by": researcher.username,
    }
    assert Item.objects.filter(queue=2).count() == stored.n_selected
    listed = client.get(ROUNDS, {"study": "gender"})
    assert listed.status_code == 200
    assert [r["id"] for r in listed.json()] == [stored.pk]


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"detector": "nope", "budget": 5}, "unknown_detector", "detector"),
        ({"detector": "fake", "budget": 5000}, "sampling_refused", "budget"),
        ({"detector": "fake", "budget": 5, "design": "active"}, "sampling_refused", "design"),
        ({"study": "missing", "detector": "fake", "budget": 5}, "unknown_study", "study"),
    ],
)
def test_a_refused_draw_is_a_400_naming_the_field_and_writes_nothing(
    sampled_study, researcher, api_for, body, code, field
):
    response = api_for(researcher).post(ROUNDS, {"study": "gender", **body})
    error = assert_error(response, 400, code)
    assert list(error["errors"]) == [field]
    assert not SamplingRound.objects.exists()


def test_a_study_of_a_protocol_without_an_estimate_is_refused(researcher, api_for, monkeypatch):
    # Every protocol has its estimate: unregister one to see the refusal.
    monkeypatch.delitem(estimands.ESTIMANDS, "objects")
    StudyFactory(slug="boxes", protocol="objects")
    response = api_for(researcher).post(ROUNDS, {"study": "boxes", "detector": "fake", "budget": 5})
    assert_error(response, 400, "not_estimable")
    assert_error(
        api_for(researcher).get(ESTIMATES, {"study": "boxes", "detector": "x"}), 400, "not_estimable"
    )


def test_a_bad_body_is_a_400_for_each_field(sampled_study, researcher, api_for):
    response = api_for(researcher).post(
        ROUNDS, {"study": "gender", "detector": "fake", "budget": "5", "x": 1}
    )
    error = assert_error(response, 400, "invalid")
    assert set(error["errors"]) == {"budget", "x"}


def test_the_estimate_is_the_commands_json_under_models(sampled_study, researcher, api_for):
    client = api_for(researcher)
    client.post(ROUNDS, {"study": "gender", "detector": "fake", "budget": 12, "seed": 3})
    sampled_study.finish(SamplingRound.objects.get())
    response = client.get(ESTIMATES, {"study": "gender", "detector": "fake", "bootstrap": 100, "seed": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body.pop("computed_at")  # the worker's, beside the command's keys
    out = io.StringIO()
    call_command(
        "estimate_bias",
        "--study",
        "gender",
        "--detector",
        "fake",
        "--bootstrap",
        "100",
        "--seed",
        "1",
        stdout=out,
    )
    assert body == {
        "study": "gender",
        "detector": "fake",
        "version": "1",
        "models": json.loads(out.getvalue()),
    }
    assert set(body["models"]) == {"sdxl", "sd3"}
    assert body["models"]["sdxl"]["rounds"] == 1


def test_an_estimate_for_a_detector_without_predictions_names_the_ones_with(
    sampled_study, researcher, api_for
):
    response = api_for(researcher).get(ESTIMATES, {"study": "gender", "detector": "nope"})
    error = assert_error(response, 400, "unknown_detector")
    assert "detectors with predictions: fake" in error["detail"]
    assert_error(api_for(researcher).get(ESTIMATES, {"study": "nope", "detector": "fake"}), 404, "not_found")


@pytest.mark.parametrize("who", ["annotator_a", "outsider"])
def test_only_researchers_may_use_the_estimates_api(request, sampled_study, api_for, who):
    client = api_for(request.getfixturevalue(who))
    assert_error(client.get(ROUNDS, {"study": "gender"}), 403, "permission_denied")
    assert_error(client.post(ROUNDS, {"study": "gender", "detector": "fake", "budget": 5}), 403)
    assert_error(client.get(ESTIMATES, {"study": "gender", "detector": "fake"}), 403)
    assert_error(
        api_for(None).get(ESTIMATES, {"study": "gender", "detector": "fake"}), 401, "not_authenticated"
    )
    assert not SamplingRound.objects.exists()


def test_the_estimate_reports_lambda_and_effective_labels_and_the_schema_says_so(
    sampled_study, researcher, api_for
):
    client = api_for(researcher)
    client.post(ROUNDS, {"study": "gender", "detector": "fake", "budget": 12, "seed": 3})
    sampled_study.finish(SamplingRound.objects.get())
    body = client.get(ESTIMATES, {"study": "gender", "detector": "fake", "bootstrap": 50}).json()
    for model in body["models"].values():
        assert 0.0 <= model["lambda"] <= 1.0
        assert model["effective_labels"] > 0
        # The point beside the interval lies in it.
        low, high = model["model_bias_score"]["ci95"]
        assert low <= model["model_bias_score"]["bias_corrected"] <= high
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    properties = schema["components"]["schemas"]["ModelEstimate"]["properties"]
    assert properties["lambda"]["type"] == "number"
    assert properties["lambda"]["nullable"] is True
    assert (properties["lambda"]["minimum"], properties["lambda"]["maximum"]) == (0, 1)
    assert properties["effective_labels"]["type"] == "number"
    assert {"lambda", "effective_labels"} <= set(schema["components"]["schemas"]["ModelEstimate"]["required"])


def test_before_any_round_lambda_and_effective_labels_are_null(sampled_study, researcher, api_for):
    body = api_for(researcher).get(ESTIMATES, {"study": "gender", "detector": "fake"}).json()
    assert body["models"]["sdxl"]["lambda"] is None
    assert body["models"]["sdxl"]["effective_labels"] is None
