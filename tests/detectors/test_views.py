from __future__ import annotations

import pytest
from django.urls import reverse

from detectors.models import DetectorRun, RunStatus
from tests.factories import ImageFactory, PredictionFactory, PromptFactory

pytestmark = pytest.mark.django_db

VERBS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def runs(study):
    running = DetectorRun.objects.create(
        study=study,
        detector="clip",
        version="v1",
        status=RunStatus.RUNNING,
        shard="2/4",
        n_total=100,
        n_done=40,
        n_failed=2,
        seconds=10.5,
        host="gpu-7",
        device="cuda",
    )
    failed = DetectorRun.objects.create(
        detector="blip2",
        version="v9",
        status=RunStatus.FAILED,
        error="Weights are not in the local cache: set BIASLAB_BLIP2_WEIGHTS",
    )
    return running, failed


def test_researcher_sees_each_run_with_status_counts_speed_and_errors(client_for, researcher, runs):
    response = client_for(researcher).get(reverse("detectors:runs"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html
    assert "2/4" in html
    assert "gpu-7 · cuda" in html
    assert ">40<" in html
    assert "4.00" in html  # (40 + 2) / 10.5 images/s
    assert "Running" in html
    assert "Failed" in html
    assert "set BIASLAB_BLIP2_WEIGHTS" in html


def test_a_long_error_is_shown_in_full_and_escaped_in_its_own_row(client_for, researcher, runs):
    _, failed = runs
    # Past the 300 characters the page used to cut at, with markup that must not render as HTML.
    failed.error = (
        "Weights 'openai/clip-vit-large-patch14' are not in the local Hugging Face cache <hub> & "
        + "this machine does not download them. " * 8
        + "Set BIASLAB_CLIP_WEIGHTS to a local folder (e.g. `huggingface-cli download ... --local-dir DIR`)."
    )
    failed.save(update_fields=["error"])
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert len(failed.error) > 300
    escaped = (
        failed.error.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")
    )
    assert f'<div class="error error-full">{escaped}</div>' in html
    assert "<hub>" not in html
    assert f'<details id="run-error-{failed.pk}" hx-preserve="true" open>' in html


def test_htmx_partial_keeps_the_full_error(client_for, researcher, runs):
    response = client_for(researcher).get(reverse("detectors:runs"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "<html" not in html
    assert "Weights are not in the local cache: set BIASLAB_BLIP2_WEIGHTS</div>" in html


def test_running_runs_make_the_table_poll_itself(client_for, researcher, runs):
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert 'hx-trigger="every 5s"' in html
    assert f'hx-get="{reverse("detectors:runs")}"' in html


def test_no_polling_once_every_run_has_ended(client_for, researcher, runs):
    DetectorRun.objects.filter(status=RunStatus.RUNNING).update(status=RunStatus.FINISHED)
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert "hx-trigger" not in html


def test_htmx_request_gets_only_the_runs_table(client_for, researcher, runs):
    response = client_for(researcher).get(reverse("detectors:runs"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "<html" not in html
    assert html.strip().startswith('<div id="runs-table"')
    assert "gpu-7" in html


def test_prediction_totals_per_detector_version(client_for, admin_user, study):
    image = ImageFactory(prompt=PromptFactory(study=study))
    PredictionFactory(image=image, detector="clip", version="v1", verdict="female")
    PredictionFactory(image=image, detector="clip", version="v2", status="failed", verdict="", error="x")
    html = client_for(admin_user).get(reverse("detectors:runs")).content.decode()
    assert "Predictions stored" in html
    assert '<td class="text">clip</td><td class="text wrap"><code>v2</code></td>' in html


def test_empty_page_says_how_to_start(client_for, researcher):
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert "No detector has run yet" in html


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
def test_runs_page_is_forbidden_to_annotators_and_outsiders_for_every_verb(
    request, client_for, runs, persona, verb
):
    client = client_for(request.getfixturevalue(persona))
    assert getattr(client, verb)(reverse("detectors:runs")).status_code == 403


def test_researcher_cannot_post_to_the_runs_page(client_for, researcher):
    assert client_for(researcher).post(reverse("detectors:runs")).status_code == 405


def test_anonymous_is_sent_to_login(client):
    response = client.get(reverse("detectors:runs"))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


# --- API -----------------------------------------------------------------------------------------
@pytest.fixture
def predictions(study):
    prompt = PromptFactory(study=study)
    a = ImageFactory(prompt=prompt, t2i_model="sdxl")
    b = ImageFactory(prompt=prompt, t2i_model="sd3")
    return [
        PredictionFactory(image=a, detector="clip", verdict="male", scores={"male": 0.8}),
        PredictionFactory(image=b, detector="clip", verdict="filtered", filter_reason="no_face"),
        PredictionFactory(image=a, detector="blip2", verdict="female", detail="a woman"),
    ]


def test_api_lists_predictions_filtered_by_detector_and_t2i_model(client_for, researcher, predictions):
    client = client_for(researcher)
    data = client.get(reverse("api-predictions")).json()
    assert data["count"] == 3
    data = client.get(reverse("api-predictions"), {"detector": "clip", "t2i_model": "sd3"}).json()
    assert data["count"] == 1
    row = data["results"][0]
    assert row["prediction"] == "filtered"
    assert row["reason"] == "no_face"
    assert row["t2i_model"] == "sd3"
    assert row["study"] == "gender"
    assert row["image"] == predictions[1].image.source_path
    assert set(row) >= {"scores", "version", "status", "error", "seconds", "detail"}


def test_api_rejects_an_unknown_study_filter(client_for, researcher, predictions):
    response = client_for(researcher).get(reverse("api-predictions"), {"study": "nope"})
    assert response.status_code == 400
    assert "study" in response.json()


def test_api_lists_runs(client_for, researcher, runs):
    data = client_for(researcher).get(reverse("api-detector-runs")).json()
    by_detector = {r["detector"]: r for r in data}
    assert by_detector["clip"]["shard"] == "2/4"
    assert by_detector["clip"]["images_per_second"] == pytest.approx(4.0)
    assert by_detector["clip"]["study"] == "gender"
    assert by_detector["blip2"]["study"] is None
    assert "BIASLAB_BLIP2_WEIGHTS" in by_detector["blip2"]["error"]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("url_name", ["api-predictions", "api-detector-runs"])
def test_api_is_forbidden_to_annotators_for_every_verb(client_for, annotator_a, predictions, url_name, verb):
    response = getattr(client_for(annotator_a), verb)(reverse(url_name))
    assert response.status_code == 403


def test_api_needs_a_login(client):
    assert client.get(reverse("api-predictions")).status_code in (401, 403)


def test_a_running_run_without_progress_is_shown_as_stale_and_stops_the_polling(client_for, researcher, runs):
    from datetime import timedelta

    from django.utils import timezone

    DetectorRun.objects.filter(status=RunStatus.RUNNING).update(
        updated_at=timezone.now() - timedelta(hours=2)
    )
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert "no progress since 2" in html
    assert "worker killed?" in html
    assert "hx-trigger" not in html
