"""Researchers' screen of the model side: detector runs (status, counts, speed) and prediction totals."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render

from detectors import selectors
from detectors.models import RunStatus
from studies import permissions
from studies.typing import HtmxHttpRequest

#: Seconds between two refreshes of the runs table while a run is running.
POLL_SECONDS = 5

researcher_only = permissions.researcher_only()


@researcher_only
def runs(request: HtmxHttpRequest) -> HttpResponse:
    run_list = list(selectors.runs_recent())
    context = {
        "runs": run_list,
        # Stale runs (worker killed) would poll forever: only live ones keep the table refreshing.
        "any_running": any(r.status == RunStatus.RUNNING and not r.looks_stale for r in run_list),
        "poll_seconds": POLL_SECONDS,
        "summaries": selectors.prediction_summaries(),
    }
    template = "detectors/runs.html#runs_table" if request.htmx else "detectors/runs.html"
    return render(request, template, context)
