"""The estimate page at scale (issue 23): the estimate last computed is kept (``KeptEstimate``),
so that a page whose data changed shows it at once, marked, while the current one is computed
by the request its notice makes; ``estimate_bias`` keeps its estimate too."""

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


def test_after_new_labels_the_page_shows_the_kept_estimate_marked_and_computes_on_request(
    sampled_study, client_for, researcher, computed
):
    client = client_for(researcher)
    round_one = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=1)
    before = client.get(URL)
    assert computed == ["fake"]
    sampled_study.finish(round_one)
    stale = client.get(URL)
    text = stale.content.decode()
    assert computed == ["fake"]  # not computed again: the kept estimate is shown
    assert "Round 1 is pending" in text
    assert "they have changed since" in text
    assert stale.context["estimate"].as_json() == before.context["estimate"].as_json()
    assert 'hx-get="/reports/estimate/?study=gender&amp;detector=fake"' in text
    assert 'href="/reports/estimate/?study=gender&amp;detector=fake&amp;fresh=1"' in text
    fresh = client.get(URL + "&detector=fake&fresh=1")  # the notice's link, without JavaScript
    assert computed == ["fake", "fake"]
    assert "Round 1 is pending" not in fresh.content.decode()
    assert 'id="stale"' not in fresh.content.decode()
    assert 'id="stale"' not in client.get(URL).content.decode()
    assert computed == ["fake", "fake"]


def test_estimate_bias_keeps_its_estimate_for_the_page_which_shows_it_marked(
    sampled_study, client_for, researcher, computed
):
    call_command(
        "estimate_bias", "--study", "gender", "--detector", "fake", "--bootstrap", "50", stdout=io.StringIO()
    )
    kept = KeptEstimate.objects.get(study=sampled_study.study, detector="fake")
    assert not kept.history
    computed.clear()  # the command's own computation
    page = client_for(researcher).get(URL)
    assert computed == []  # the command's estimate (no history, 50 replicates) is shown, marked
    assert 'id="stale"' in page.content.decode()
    assert client_for(researcher).get(URL, headers={"HX-Request": "true"}).status_code == 200
    assert computed == ["fake"]
    assert KeptEstimate.objects.get(study=sampled_study.study, detector="fake").history


def test_a_kept_estimate_that_no_longer_unpickles_is_computed_again(
    sampled_study, client_for, researcher, computed
):
    client = client_for(researcher)
    client.get(URL)
    KeptEstimate.objects.update(report=b"not a pickle", state="old")
    cache.clear()
    page = client.get(URL)
    assert page.status_code == 200
    assert computed == ["fake", "fake"]
    assert 'id="stale"' not in page.content.decode()
