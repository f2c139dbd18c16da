"""The estimate page, researchers only: the kept estimate (or its job's progress, polled by htmx)
and the "label N more" form."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django_htmx.http import HttpResponseClientRedirect, HttpResponseClientRefresh

from estimates import estimands
from estimates import selectors as sel
from estimates.forms import LabelMoreForm
from estimates.models import JobStatus
from estimates.services import SamplingError, estimate_request, estimate_worker_ensure, sampling_round_create
from reports.analyses import AnalysisError, NoAnalysis, analysis_of
from reports.views import BadFilter, Filters, bad_filter, base_context, parse_filters
from studies import permissions
from studies.typing import HtmxHttpRequest

TEMPLATE = "estimates/estimate.html"
#: Bootstrap replicates of the page's intervals (the command's default too).
BOOTSTRAP = 1000


researcher_only = permissions.researcher_only(
    methods=("GET", "HEAD", "POST"), message="Estimates are for researchers."
)


def _detector(filters: Filters, spec: estimands.EstimandProtocol) -> str | None:
    """The detector shown: the filter's, else the latest round's, else the first with predictions."""
    assert filters.study is not None
    if filters.detector:
        return filters.detector
    latest = sel.rounds_of_study(filters.study)
    if latest:
        return latest[0].detector
    known = estimands.detectors_of(spec, filters.study)
    return known[0] if known else None


def _progress(job: Any) -> dict[str, Any]:
    """The progress notice's figures: status, seconds running, and the last computation's seconds."""
    kept = sel.estimate_kept(job.study, job.detector, job.options)
    elapsed = (timezone.now() - job.started_at).total_seconds() if job.started_at else None
    expected = kept.seconds if kept is not None else None
    return {
        "job": job,
        "elapsed": None if elapsed is None or job.status != JobStatus.RUNNING else round(elapsed),
        "expected": None if expected is None else max(round(expected), 1),
        "progress_url": reverse("estimates:job", args=[job.pk]),
    }


def _context(
    request: HtmxHttpRequest,
    filters: Filters,
    form: LabelMoreForm,
    detector: str | None,
    spec: estimands.EstimandProtocol,
) -> dict[str, Any]:
    assert filters.study is not None
    try:
        analysis = analysis_of(filters.study)
    except (NoAnalysis, AnalysisError):
        analysis = None
    query = filters.query(detector=detector) if detector else filters.query()
    context = base_context(filters, "estimate", analysis) | {
        "study": filters.study,
        "detector": detector,
        "form": form,
        "rounds": sel.rounds_of_study(filters.study),
        "output_kind": estimands.kinds_wording(spec),
        "action": reverse("estimates:page") + (f"?{query}" if query else ""),
    }
    if detector is None:
        return context
    try:
        asked = estimate_request(
            study=filters.study, detector=detector, n_boot=BOOTSTRAP, seed=0, history=True
        )
    except LookupError as error:  # a detector without predictions of the kind the estimate reads
        return context | {"estimate_error": f"{error}."}
    kept = asked.kept
    context |= {
        "estimate": kept.report if kept is not None else None,
        **(kept.report.page_context() if kept is not None else {}),
        "computed_at": kept.computed_at if kept is not None else None,
        "stale": not asked.current and kept is not None,
        "refresh_url": reverse("estimates:page") + f"?{query}",
    }
    if not asked.current and asked.job is not None:
        context |= _progress(asked.job)
    return context


@researcher_only
def estimate_job_progress(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """The progress notice of an estimate job, polled by htmx (which also restarts a dead worker)."""
    job = sel.estimate_job(job_id)
    if job is None:
        raise Http404("No such estimate job (a newer one replaced it): reload the page.")
    if job.status == JobStatus.DONE:
        if request.htmx:
            return HttpResponseClientRefresh()
    elif job.status == JobStatus.QUEUED:
        estimate_worker_ensure()
    return render(request, f"{TEMPLATE}#progress", _progress(job))


@researcher_only
def estimate_page(request: HtmxHttpRequest) -> HttpResponse:
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return bad_filter(error)
    if filters.study is None:
        return bad_filter(BadFilter("Choose a study (?study=...)."))
    spec = estimands.for_protocol(filters.study.protocol)
    if spec is None:
        raise Http404(f"Estimates from sampled labels exist for {', '.join(estimands.known())} studies.")
    detector = _detector(filters, spec)
    if request.method == "POST":
        form = LabelMoreForm(request.POST)
        if form.is_valid() and detector is None:
            form.add_error(
                None,
                f"No detector has {estimands.kinds_wording(spec)} predictions in this study: run "
                "run_detectors first.",
            )
        if form.is_valid() and detector is not None:
            try:
                sampling_round_create(
                    study=filters.study,
                    detector=detector,
                    budget=form.cleaned_data["budget"],
                    design=form.cleaned_data["design"],
                    user=request.user,  # type: ignore[arg-type]  # researcher_only: a User
                )
            except SamplingError as error:
                form.add_error(error.field if error.field in form.fields else None, error.message)
            else:
                target = reverse("estimates:page") + f"?{filters.query(detector=detector)}"
                if request.htmx:
                    return HttpResponseClientRedirect(target)
                return redirect(target, permanent=False)
        if request.htmx:
            context = {"form": form, "detector": detector, "action": request.get_full_path()}
            return render(request, f"{TEMPLATE}#label_more", context)
        return render(request, TEMPLATE, _context(request, filters, form, detector, spec), status=400)
    form = LabelMoreForm()
    name = f"{TEMPLATE}#results" if request.htmx else TEMPLATE
    return render(request, name, _context(request, filters, form, detector, spec))
