from __future__ import annotations

import pytest
from django.urls import reverse

from detectors.models import DetectorRun, RunStatus
from tests.factories import (
    ItemFactory,
    PredictionFactory,
    PromptFactory,
    StudyFactory,
    image_of,
)

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
        requests=12,
        cache_hits=3,
        prompt_tokens=1200,
        completion_tokens=24,
        cost_usd=0.000612,
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
    assert "12 requests, 3 cached" in html
    assert "1200 + 24 tokens · $0.0006" in html


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
    image = image_of(ItemFactory(prompt=PromptFactory(study=study)))
    PredictionFactory(
        image=image, detector="clip", version="v1", output={"label": "female", "reason": "", "scores": {}}
    )
    PredictionFactory(image=image, detector="clip", version="v2", status="failed", output={}, error="x")
    html = client_for(admin_user).get(reverse("detectors:runs")).content.decode()
    assert "Predictions stored" in html
    assert '<td class="text">clip</td><td class="text wrap"><code>v2</code></td>' in html
    assert (
        '<td class="text">clip</td><td class="text wrap"><code>v1</code></td><td class="text">gender</td>\n'
        "      <td>0</td><td>1</td><td>0</td>\n      <td>1</td><td>0</td><td>1</td>"
    ) in html


def test_prediction_totals_count_verdicts_only_for_gender_detectors(client_for, researcher, study):
    from detectors.selectors import prediction_summaries

    images = [image_of(ItemFactory(prompt=PromptFactory(study=study))) for _ in range(3)]
    measured = {"face": True, "age": 30.0, "gender": "male", "skin_gray": 100.0}
    for image in images[:2]:
        PredictionFactory(image=image, detector="measure", kind="measurements", output=measured)
    PredictionFactory(
        image=images[2], detector="measure", kind="measurements", status="failed", output={}, error="x"
    )
    PredictionFactory(
        image=images[0], detector="clip", output={"label": "filtered", "reason": "no_face", "scores": {}}
    )
    summaries = {s.detector: s for s in prediction_summaries()}
    assert (summaries["measure"].male, summaries["measure"].ok, summaries["measure"].failed) == (0, 2, 1)
    assert summaries["measure"].total == 3
    assert (summaries["clip"].filtered, summaries["clip"].ok, summaries["clip"].total) == (1, 1, 1)
    html = client_for(researcher).get(reverse("detectors:runs")).content.decode()
    assert '<td class="text">measurements</td>\n      <td>—</td><td>—</td><td>—</td>' in html


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
    a = image_of(ItemFactory(prompt=prompt, t2i_model="sdxl"))
    b = image_of(ItemFactory(prompt=prompt, t2i_model="sd3", key="sd3/b.png"))
    return [
        PredictionFactory(
            image=a, detector="clip", output={"label": "male", "reason": "", "scores": {"male": 0.8}}
        ),
        PredictionFactory(
            image=b, detector="clip", output={"label": "filtered", "reason": "no_face", "scores": {}}
        ),
        PredictionFactory(
            image=a,
            detector="blip2",
            output={"label": "female", "reason": "", "scores": {}, "detail": "a woman"},
        ),
    ]


def test_api_lists_predictions_filtered_by_detector_and_t2i_model(client_for, researcher, predictions):
    client = client_for(researcher)
    data = client.get(reverse("api-predictions")).json()
    assert data["count"] == 3
    assert [r["detail"] for r in data["results"]] == ["", "", "a woman"]
    data = client.get(reverse("api-predictions"), {"detector": "clip", "t2i_model": "sd3"}).json()
    assert data["count"] == 1
    row = data["results"][0]
    assert row["prediction"] == "filtered"
    assert row["reason"] == "no_face"
    assert row["t2i_model"] == "sd3"
    assert row["study"] == "gender"
    assert row["image"] == row["item"] == "sd3/b.png"
    assert row["image_id"] == predictions[1].image_id
    assert (row["kind"], row["output"]) == (
        "gender",
        {"label": "filtered", "reason": "no_face", "scores": {}},
    )
    assert set(row) >= {"scores", "version", "status", "error", "seconds", "detail"}


def test_api_lists_a_shared_file_once_named_by_its_item_in_the_study_asked_for(
    client_for, researcher, predictions
):
    other = ItemFactory(prompt=PromptFactory(study=StudyFactory(slug="other")), image=predictions[0].image)
    client = client_for(researcher)
    assert client.get(reverse("api-predictions"), {"detector": "clip"}).json()["count"] == 2
    data = client.get(reverse("api-predictions"), {"study": "other"}).json()
    assert [(r["detector"], r["image"], r["study"]) for r in data["results"]] == [
        ("clip", other.key, "other"),
        ("blip2", other.key, "other"),
    ]


def test_api_lists_outputs_of_other_kinds(client_for, researcher, study):
    image = image_of(ItemFactory(prompt=PromptFactory(study=study)))
    objects = {"objects": [{"class": "tie", "confidence": 0.5, "box": [0.0, 0.0, 1.0, 2.0]}]}
    PredictionFactory(image=image, detector="yolo", kind="objects", output=objects)
    row = client_for(researcher).get(reverse("api-predictions")).json()["results"][0]
    assert (row["kind"], row["output"], row["prediction"], row["reason"], row["scores"]) == (
        "objects",
        objects,
        "",
        "",
        {},
    )


def test_api_rejects_an_unknown_study_filter(client_for, researcher, predictions):
    response = client_for(researcher).get(reverse("api-predictions"), {"study": "nope"})
    assert response.status_code == 400
    body = response.json()
    assert (body["code"], list(body["errors"])) == ("unknown_filter", ["study"])


@pytest.mark.parametrize("query", ["detector=clip&detector=blip2", "study=", "page=", "page=0", "page=last"])
def test_api_rejects_repeated_empty_and_malformed_parameters(client_for, researcher, predictions, query):
    response = client_for(researcher).get(f"{reverse('api-predictions')}?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_api_answers_a_page_past_the_last_with_404(client_for, researcher, predictions):
    response = client_for(researcher).get(reverse("api-predictions"), {"page": 2})
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_api_lists_runs(client_for, researcher, runs):
    data = client_for(researcher).get(reverse("api-detector-runs")).json()
    by_detector = {r["detector"]: r for r in data}
    assert by_detector["clip"]["shard"] == "2/4"
    assert by_detector["clip"]["images_per_second"] == pytest.approx(4.0)
    assert by_detector["clip"]["study"] == "gender"
    assert by_detector["blip2"]["study"] is None
    assert "BIASLAB_BLIP2_WEIGHTS" in by_detector["blip2"]["error"]
    assert (by_detector["clip"]["requests"], by_detector["clip"]["cache_hits"]) == (12, 3)
    assert by_detector["clip"]["cost_usd"] == pytest.approx(0.000612)
    assert by_detector["blip2"]["cost_usd"] is None


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("url_name", ["api-predictions", "api-detector-runs"])
@pytest.mark.parametrize("persona", ["annotator_a", "researcher"])
def test_api_is_forbidden_to_annotators_and_read_only_for_everyone(
    request, client_for, predictions, persona, url_name, verb
):
    """GET: 403 for an annotator. Other verbs: 405 with Allow for everyone alike, before the
    role is looked at."""
    response = getattr(client_for(request.getfixturevalue(persona)), verb)(reverse(url_name))
    if verb == "get":
        assert response.status_code == (403 if persona == "annotator_a" else 200)
    else:
        assert response.status_code == 405
        assert response["Allow"] == "GET, OPTIONS, HEAD"
        assert response.json()["code"] == "method_not_allowed"


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


def test_admin_lists_predictions_and_finds_them_by_any_path_of_their_file(
    client_for, admin_user, predictions
):
    client = client_for(admin_user)
    url = reverse("admin:detectors_prediction_changelist")
    html = client.get(url).content.decode()
    assert "3 predictions" in html
    html = client.get(url, {"q": "sd3/b.png"}).content.decode()
    assert "1 prediction" in html
    assert "filtered" in html
    assert client.get(reverse("admin:detectors_detectorrun_changelist")).status_code == 200


def test_admin_lists_a_judge_s_cached_answers_and_can_delete_them_but_not_add_or_change(
    client_for, admin_user
):
    from detectors.models import JudgeResponse

    row = JudgeResponse.objects.create(
        key="k" * 64,
        image_sha256="a" * 64,
        model="qwen-vl",
        question="Wealthy?",
        mode="choice",
        content="Yes",
    )
    client = client_for(admin_user)
    html = client.get(reverse("admin:detectors_judgeresponse_changelist"), {"q": "qwen"}).content.decode()
    assert "1 judge response" in html
    assert client.get(reverse("admin:detectors_judgeresponse_add")).status_code == 403
    delete = reverse("admin:detectors_judgeresponse_delete", args=[row.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not JudgeResponse.objects.exists()
