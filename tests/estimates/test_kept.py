"""The estimate page at scale: the estimate last computed is kept (``KeptEstimate``), so that
a page whose data changed shows it at once, marked, while the estimate worker computes the
current one; ``estimate_bias`` keeps its estimate too."""

from __future__ import annotations

import dataclasses
import io

import pytest
from django.core.cache import cache
from django.core.management import call_command

from estimates import estimands
from estimates.models import KeptEstimate
from estimates.services import sampling_round_create

pytestmark = pytest.mark.django_db

URL = "/reports/estimate/?study=gender"


@pytest.fixture
def computed(monkeypatch) -> list[str]:
    """The detectors whose estimate the page computed, in order (the real computation runs)."""
    calls: list[str] = []
    real = estimands.for_protocol

    def counted(protocol):
        spec = real(protocol)
        if spec is None:
            return None

        def report(study, detector, **options):
            calls.append(detector)
            return spec.report(study, detector, **options)

        return dataclasses.replace(spec, report=report)

    monkeypatch.setattr(estimands, "for_protocol", counted)
    return calls


def test_the_first_page_computes_and_keeps_the_estimate_and_another_process_reads_it(
    sampled_study, client_for, researcher, computed
):
    client = client_for(researcher)
    first = client.get(URL)
    assert first.status_code == 200
    assert computed == ["fake"]
    kept = KeptEstimate.objects.get(study=sampled_study.study, detector="fake")
    assert kept.history
    cache.clear()  # another process: nothing in its cache, the kept estimate is current
    again = client.get(URL)
    assert computed == ["fake"]
    assert 'id="stale"' not in again.content.decode()
    assert again.context["estimate"].as_json() == first.context["estimate"].as_json()


def test_after_new_labels_the_page_shows_the_kept_estimate_marked_while_the_worker_computes(
    sampled_study, client_for, researcher, computed, monkeypatch, detached_worker
):
    from estimates import services

    monkeypatch.setattr(services, "estimate_worker_start", lambda: None)  # started, not run yet
    client = client_for(researcher)
    round_one = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=1)
    client.get(URL)
    services.estimate_jobs_work()
    before = client.get(URL)
    assert computed == ["fake"]
    sampled_study.finish(round_one)
    stale = client.get(URL)
    text = stale.content.decode()
    assert computed == ["fake"]  # not computed in the request: the kept estimate is shown
    assert "Round 1 is pending" in text
    assert "they have changed since" in text
    assert stale.context["estimate"].as_json() == before.context["estimate"].as_json()
    assert 'hx-trigger="every 2s"' in text
    assert "fresh=1" not in text
    services.estimate_jobs_work()  # the worker
    assert computed == ["fake", "fake"]
    fresh = client.get(URL).content.decode()
    assert "Round 1 is pending" not in fresh
    assert 'id="stale"' not in fresh
    assert computed == ["fake", "fake"]


def test_estimate_bias_keeps_its_estimate_for_the_page_which_shows_it_marked(
    sampled_study, client_for, researcher, computed, monkeypatch, detached_worker
):
    from estimates import services

    monkeypatch.setattr(services, "estimate_worker_start", lambda: None)
    call_command(
        "estimate_bias", "--study", "gender", "--detector", "fake", "--bootstrap", "50", stdout=io.StringIO()
    )
    kept = KeptEstimate.objects.get(study=sampled_study.study, detector="fake")
    assert not kept.history
    computed.clear()  # the command's own computation
    page = client_for(researcher).get(URL)
    assert computed == []  # the command's estimate (no history, 50 replicates) is shown, marked
    assert 'id="stale"' in page.content.decode()
    services.estimate_jobs_work()
    assert computed == ["fake"]
    assert KeptEstimate.objects.get(
        study=sampled_study.study, detector="fake", options__contains="history=1"
    ).history


def test_a_kept_estimate_that_is_not_a_kept_report_is_computed_again(
    sampled_study, client_for, researcher, computed
):
    client = client_for(researcher)
    client.get(URL)
    KeptEstimate.objects.update(report={"not": "a report"})
    cache.clear()
    page = client.get(URL)
    assert page.status_code == 200
    assert computed == ["fake", "fake"]
    assert 'id="stale"' not in page.content.decode()
