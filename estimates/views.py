"""The estimate page of a study's report: the numbers its protocol estimates
(``estimates.estimands``; e.g. the bias score per T2I model, or the GEP score and vector per
model and setting) with each interval beside the detector's and the labels-only one, λ and
the effective labels, the interval width round by round, the rounds
drawn, and the "label N more" form that draws the next round.

Researchers (and admins) only, for every method: others get 403, anonymous users the login
page. GET and HEAD show the page; POST draws a round through
``estimates.services.sampling_round_create`` (CSRF-checked by the middleware). htmx requests
get the ``results`` partial (GET) or the ``label_more`` partial (a POST with errors); a POST
that drew a round redirects, so a reload never draws twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from estimates import estimands
from estimates import selectors as sel
from estimates.forms import LabelMoreForm
from estimates.services import SamplingError, estimate_keep, sampling_round_create
from reports.analyses import AnalysisError, NoAnalysis, analysis_of
from reports.views import CACHE_SECONDS, BadFilter, Filters, bad_filter, base_context, parse_filters
from studies import permissions
from studies.typing import HtmxHttpRequest

View = Callable[..., HttpResponse]
TEMPLATE = "estimates/estimate.html"
#: Bootstrap replicates of the page's intervals (the command's default too).
BOOTSTRAP = 1000
METHODS = ("GET", "HEAD", "POST")


researcher_only = permissions.researcher_only(methods=METHODS, message="Estimates are for researchers.")


def _detector(filters: Filters, spec: estimands.EstimandProtocol) -> str | None:
    """The detector shown: the filter's, else the one of the study's latest round, else the
    first with predictions of the kind the estimate reads."""
    assert filters.study is not None
    if filters.detector:
        return filters.detector
    latest = sel.rounds_of_study(filters.study)
    if latest:
        return latest[0].detector
    known = sel.detectors_with_predictions(filters.study, spec.output_kind)
    return known[0] if known else None


def _estimate(
    filters: Filters, detector: str, spec: estimands.EstimandProtocol, *, may_be_stale: bool
) -> tuple[estimands.Report, sel.Kept | None]:
    """The estimate with its round-by-round history, and None; or, when ``may_be_stale`` and
    the current one is not computed yet, the one kept from earlier data and its ``Kept`` (the
    page shows it at once and asks for the current one: ``_context``).

    The current estimate is looked for in the cache (this process's, or Redis), then in the
    kept estimate (``KeptEstimate``: any process computed it), and computed only when neither
    holds it — then kept and cached. A new round or label changes the state, so it is never
    shown as current after the data changed."""
    assert filters.study is not None
    study = filters.study
    state = sel.estimate_state(
        study, fingerprint=filters.fingerprint, protocol=spec.key, n_boot=BOOTSTRAP, seed=0, history=True
    )
    key = "estimate:" + hashlib.sha256(repr((study.pk, detector, state)).encode()).hexdigest()
    report = cache.get(key)
    if report is not None:
        return report, None
    kept = sel.estimate_kept(study, detector)
    if kept is not None and kept.state == state:
        cache.set(key, kept.report, CACHE_SECONDS)
        return kept.report, None
    if kept is not None and may_be_stale:
        return kept.report, kept
    report = spec.report(study, detector, n_boot=BOOTSTRAP, history=True)
    estimate_keep(study=study, detector=detector, state=state, report=report, history=True)
    cache.set(key, report, CACHE_SECONDS)
    return report, None


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
        "output_kind": spec.output_kind,
        "action": reverse("estimates:page") + (f"?{filters.query()}" if filters.query() else ""),
    }
    if detector is None:
        return context
    # A full page may show the estimate kept from earlier data while the current one is
    # computed by the request its notice makes (htmx, on load); that request, and a page asked
    # with ``fresh=1`` (the notice's link, without JavaScript), compute it.
    may_be_stale = not request.htmx and request.GET.get("fresh") != "1"
    estimate, stale = _estimate(filters, detector, spec, may_be_stale=may_be_stale)
    page = reverse("estimates:page") + f"?{query}"
    context |= {
        "estimate": estimate,
        **estimate.page_context(),
        "stale": stale,
        "refresh_url": page,
        "fresh_url": page + ("&" if query else "") + "fresh=1",
    }
    return context


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
                f"No detector has {spec.output_kind} predictions in this study: run run_detectors first.",
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
