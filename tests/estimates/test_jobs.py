"""Estimate jobs: an estimate is computed once per (study, detector, options, the study's own
data version) by the estimate worker, never inside a web request, and shared — the page and
the API read the kept result (JSON, never a pickle), at most one computation per study runs at
a time (a partial unique index), and a dead worker's job is run again."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from estimates import selectors as sel
from estimates import services
from estimates.models import EstimateJob, JobStatus, KeptEstimate
from estimates.services import estimate_request, sampling_round_create
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.django_db

PAGE = "/reports/estimate/?study=gender"
API = "/api/estimates/"
QUERY = {"study": "gender", "detector": "fake", "bootstrap": 50}


@pytest.fixture
def starts(monkeypatch, detached_worker) -> list[int]:
    """Worker starts the web side asked for (none actually starts: the test runs the worker)."""
    calls: list[int] = []
    monkeypatch.setattr(services, "estimate_worker_start", lambda: calls.append(1))
    return calls


@pytest.fixture
def drawn(sampled_study):
    sampling_round = sampling_round_create(study=sampled_study.study, detector="fake", budget=12, seed=3)
    sampled_study.finish(sampling_round)
    return sampled_study


def test_the_kept_estimate_is_json_and_reading_it_back_never_unpickles(
    drawn, client_for, researcher, monkeypatch
):
    unpickled: list[object] = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: unpickled.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: unpickled.append(a))
    client = client_for(researcher)
    first = client.get(PAGE)
    assert first.status_code == 200
    kept = KeptEstimate.objects.get(study=drawn.study, detector="fake")
    assert isinstance(kept.report, dict)
    assert kept.report["api_json"]["models"]["sdxl"]["n_images"] == 24
    cache.clear()
    again = client.get(PAGE)  # read back from the database: the current one
    assert again.context["estimate"].as_json() == first.context["estimate"].as_json()
    assert 'id="progress"' not in again.content.decode()
    assert unpickled == []


def test_a_kept_row_of_another_shape_is_computed_again_not_trusted(drawn, client_for, researcher):
    client = client_for(researcher)
    client.get(PAGE)
    KeptEstimate.objects.update(report={"shape": 1, "page": {"table": "<script>"}})
    page = client.get(PAGE)
    assert page.status_code == 200
    assert "<script>" not in page.content.decode()
    assert KeptEstimate.objects.get().report["shape"] == 1
    assert "api_json" in KeptEstimate.objects.get().report


def test_the_api_answers_202_with_the_job_and_200_with_the_kept_result_once_done(
    drawn, researcher, api_for, starts
):
    client = api_for(researcher)
    queued = client.get(API, QUERY)
    assert queued.status_code == 202, queued.content
    job = queued.json()
    assert job["status"] == "queued"
    assert queued["Location"] == job["status_url"]
    assert job["status_url"].endswith(f"/api/estimates/jobs/{job['id']}/")
    assert starts == [1]
    again = client.get(API, QUERY)  # the same estimate of the same data: the same job, no new worker
    assert again.status_code == 202
    assert again.json()["id"] == job["id"]
    assert EstimateJob.objects.count() == 1
    assert starts == [1]
    assert services.estimate_jobs_work() == 1
    status = client.get(job["status_url"]).json()
    assert status["status"] == "done"
    assert status["attempts"] == 1
    result = client.get(status["result_url"])
    assert result.status_code == 200
    body = result.json()
    assert set(body) >= {"study", "detector", "version", "models", "computed_at"}
    assert body["models"]["sdxl"]["n_images"] == 24


def test_the_page_queues_shows_progress_polled_by_htmx_and_reloads_when_done(
    drawn, client_for, researcher, starts
):
    client = client_for(researcher)
    page = client.get(PAGE).content.decode()
    job = EstimateJob.objects.get()
    assert f'hx-get="/reports/estimate/job/{job.pk}/"' in page
    assert 'hx-trigger="every 2s"' in page
    assert "queued" in page
    assert 'id="table-' not in page  # nothing computed inside the request
    poll = client.get(f"/reports/estimate/job/{job.pk}/", headers={"HX-Request": "true"})
    assert poll.status_code == 200
    assert "every 2s" in poll.content.decode()
    services.estimate_jobs_work()
    done = client.get(f"/reports/estimate/job/{job.pk}/", headers={"HX-Request": "true"})
    assert done["HX-Refresh"] == "true"
    shown = client.get(PAGE).content.decode()
    assert 'id="table-' in shown
    assert 'id="progress"' not in shown


def test_after_a_label_the_page_shows_the_kept_estimate_marked_while_the_new_one_computes(
    drawn, client_for, researcher, starts
):
    client = client_for(researcher)
    client.get(PAGE)
    services.estimate_jobs_work()
    item = next(i for i in drawn.items if not i.final_labels.exists())
    FinalLabelFactory(item=item, value=drawn.truth[item.pk])
    page = client.get(PAGE).content.decode()
    assert 'id="stale"' in page
    assert 'id="table-' in page
    assert 'hx-trigger="every 2s"' in page
    assert EstimateJob.objects.filter(status=JobStatus.QUEUED).count() == 1


def test_staleness_is_per_study(drawn, starts):
    before = sel.study_data_version(drawn.study)
    other = StudyFactory(name="Other", slug="other")
    item = ItemFactory(prompt=PromptFactory(study=other, word="cook"), t2i_model="sdxl")
    FinalLabelFactory(item=item, value="male")
    assert sel.study_data_version(drawn.study) == before
    mine = next(i for i in drawn.items if not i.final_labels.exists())
    FinalLabelFactory(item=mine, value="male")
    assert sel.study_data_version(drawn.study) != before


def test_at_most_one_job_of_a_study_runs_and_the_database_refuses_a_second(drawn, starts):
    first = estimate_request(study=drawn.study, detector="fake", n_boot=10, seed=0, history=False).job
    second = estimate_request(study=drawn.study, detector="fake", n_boot=20, seed=0, history=False).job
    assert first is not None
    assert second is not None
    assert first.pk != second.pk
    claimed = services.estimate_job_claim()
    assert claimed is not None
    assert claimed.pk == first.pk
    assert services.estimate_job_claim() is None  # the study's other job waits
    with pytest.raises(IntegrityError), transaction.atomic():
        EstimateJob.objects.filter(pk=second.pk).update(status=JobStatus.RUNNING)
    services.estimate_job_run(claimed)
    assert services.estimate_job_claim().pk == second.pk


def test_a_dead_workers_job_is_run_again_and_fails_after_three_tries(drawn, starts, settings):
    job = estimate_request(study=drawn.study, detector="fake", n_boot=10, seed=0, history=False).job
    assert job is not None
    long_ago = timezone.now() - timedelta(seconds=settings.ESTIMATE_JOB_STALE_SECONDS + 1)
    for attempt in range(1, 4):
        claimed = services.estimate_job_claim()
        assert claimed is not None
        assert claimed.attempts == attempt
        EstimateJob.objects.filter(pk=job.pk).update(heartbeat_at=long_ago)  # its worker died
        services.estimate_jobs_requeue_stale()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "stopped 3 times" in job.error
    asked = estimate_request(study=drawn.study, detector="fake", n_boot=10, seed=0, history=False)
    assert asked.job is not None
    assert asked.job.status == JobStatus.QUEUED


def test_a_live_workers_job_starts_no_second_worker(drawn, starts):
    estimate_request(study=drawn.study, detector="fake", n_boot=10, seed=0, history=False)
    assert starts == [1]
    services.estimate_job_claim()  # the worker runs it, beating
    EstimateJob.objects.update(spawned_at=None)
    estimate_request(study=drawn.study, detector="fake", n_boot=20, seed=0, history=False)
    assert starts == [1]


def test_a_failed_computation_is_shown_with_its_error(drawn, client_for, researcher, monkeypatch):
    from estimates import estimands

    real = estimands.for_protocol

    def broken(protocol):
        import dataclasses

        def report(*a, **k):
            raise MemoryError("out of memory")

        return dataclasses.replace(real(protocol), report=report)

    monkeypatch.setattr(estimands, "for_protocol", broken)
    page = client_for(researcher).get(PAGE).content.decode()
    assert "Computing the current estimate failed: MemoryError: out of memory" in page
    assert "every 2s" not in page


def test_an_unhandled_error_in_the_estimates_api_is_a_json_500_with_debug_off(
    drawn, researcher, monkeypatch, settings
):
    from django.test import Client

    from estimates import api

    def broken(**kwargs):
        raise RuntimeError("disk on fire")

    settings.DEBUG = False
    monkeypatch.setattr(api, "estimate_request", broken)
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    response = client.get(API, QUERY)
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "server_error"
    assert "disk on fire" not in response.content.decode()


def test_the_deploy_guide_gives_gunicorn_a_timeout_of_at_least_two_minutes_and_says_why():
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "deploy.md").read_text()
    timeouts = [int(t) for t in re.findall(r"gunicorn [^\n]*--timeout (\d+)", guide)]
    assert timeouts
    assert min(timeouts) >= 120
    assert "estimates_worker" in guide
    assert "WORKER TIMEOUT" in guide or "kills a\nworker" in guide or "kills a worker" in guide
