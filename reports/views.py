"""The researchers' dashboard: each study's report page and downloads of its tables and charts."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlencode

from django.core.cache import cache
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import get_conditional_response

from metrics import consensus
from reports import render as renderers
from reports import selectors as sel
from reports.analyses import (
    Analysis,
    AnalysisError,
    FilterNeeded,
    NoAnalysis,
    analysis_for,
    analysis_of,
)
from reports.charts import FORMATS as CHART_FORMATS
from reports.tables import UnknownTable
from studies import permissions
from studies.models import Study
from studies.selectors import study_by_slug
from studies.session import study_remember, study_remembered
from studies.typing import HtmxHttpRequest

T = TypeVar("T")
BOOTSTRAP = 1000
# Cached under the data fingerprint; the timeout bounds how long an edit bypassing the services goes unseen.
CACHE_SECONDS = 600


# --- permissions --------------------------------------------------------------------------------


researcher_only = permissions.researcher_only(message="Reports are for researchers.")


# --- filters ------------------------------------------------------------------------------------


class BadFilter(ValueError):
    """A filter value that is not in the data (unknown study, model, category or detector)."""


def safe_name(text: str) -> str:
    """``text`` safe for a file name: runs outside [A-Za-z0-9._-] become "_"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _cache_key(fingerprint: tuple[Any, ...], kind: str, **scope: Any) -> str:
    raw = repr((kind, sorted(scope.items()), fingerprint))
    return "reports:" + hashlib.sha256(raw.encode()).hexdigest()


def cached(fingerprint: tuple[Any, ...], kind: str, compute: Callable[[], T], **scope: Any) -> T:
    """``compute()``, cached under (kind, scope, the data fingerprint of this request)."""
    key = _cache_key(fingerprint, kind, **scope)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, CACHE_SECONDS)
    return value


@dataclass(frozen=True)
class Filters:
    """A request's filters, form choices and data fingerprint (read once per request)."""

    study: Study | None
    t2i_model: str | None
    category: str | None
    detector: str | None
    options: sel.FilterOptions
    fingerprint: tuple[Any, ...] = ()

    @property
    def scope(self) -> sel.Scope:
        if self.study is None:
            raise BadFilter("Choose a study (?study=...).")
        return sel.Scope(self.study, t2i_model=self.t2i_model, category=self.category)

    def params(self, **overrides: str | None) -> dict[str, str]:
        values = {
            "study": self.study.slug if self.study else None,
            "t2i_model": self.t2i_model,
            "category": self.category,
            "detector": self.detector,
        } | overrides
        return {k: v for k, v in values.items() if v}

    def query(self, **overrides: str | None) -> str:
        """The filters as a query string, for links that keep them (downloads, drill-downs)."""
        return urlencode(self.params(**overrides))

    def slug(self) -> str:
        """A file-name-safe summary of the filters, e.g. "gender-sdxl"."""
        return safe_name("-".join(str(v) for v in self.params().values())) or "all"

    def _report_key(self) -> dict[str, Any]:
        # The category only where the analysis applies it, so a report across categories is computed once.
        try:
            applies = self.study is not None and analysis_for(self.study.protocol).category_applies
        except NoAnalysis:
            applies = False
        category = self.category if applies else None
        return {
            "study": self.study.pk if self.study else None,
            "t2i_model": self.t2i_model,
            "category": category,
            "detector": self.detector,
        }

    def cached(self, kind: str, compute: Callable[[], T], **key: Any) -> T:
        """``compute()`` cached under ``kind``, these filters (category included) and ``key``."""
        return cached(
            self.fingerprint, kind, compute, **(self._report_key() | {"category": self.category}), **key
        )

    def result(self, *, bootstrap: int) -> Any:
        """The analysis's computation for these filters, cached (a result with intervals serves without)."""
        analysis = analysis_of(self.scope.study)
        scope = self._report_key()
        if bootstrap == 0:
            full = cache.get(_cache_key(self.fingerprint, "report", **scope, bootstrap=BOOTSTRAP))
            if full is not None:
                return full

        def compute() -> Any:
            return analysis.compute(
                sel.Scope(self.scope.study, t2i_model=self.t2i_model, category=scope["category"]),
                detector=self.detector,
                bootstrap=bootstrap,
                seed=0,
            )

        return cached(self.fingerprint, "report", compute, **scope, bootstrap=bootstrap)


def parse_filters(request: HttpRequest, *, study: Study | None = None) -> Filters:
    """Read study, t2i_model, category and detector from GET (empty: all); BadFilter for unknown values."""
    slug = request.GET.get("study", "").strip()
    if slug:
        chosen_study = study_by_slug(slug, missing=lambda _known: BadFilter(f"There is no study {slug!r}."))
        if study is not None and chosen_study != study:
            raise BadFilter(f"This page belongs to study {study.slug!r}, not {slug!r}.")
        study = chosen_study
    elif study is None and "choose" not in request.GET:
        study = study_remembered(request)
    if study is None:
        studies = list(Study.objects.order_by("id")[:2])
        study = studies[0] if len(studies) == 1 else None
    else:
        study_remember(request, study)
    fingerprint = sel.data_fingerprint()
    # The options scan the predictions (distinct detectors): cached like the report.
    options = cached(
        fingerprint, "filter_options", lambda: sel.filter_options(study=study), study=study and study.pk
    )
    chosen: dict[str, str | None] = {}
    for name, allowed in (
        ("t2i_model", options.t2i_models),
        ("category", options.categories),
        ("detector", options.detectors),
    ):
        value = request.GET.get(name, "").strip() or None
        if value is not None and value not in allowed:
            label = name.replace("_", " ").replace("t2i", "T2I")
            raise BadFilter(f"No {label} {value!r} in {'study ' + study.name if study else 'any study'}.")
        chosen[name] = value
    return Filters(study=study, options=options, fingerprint=fingerprint, **chosen)


def render_page(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], partial: str = "results"
) -> HttpResponse:
    """The named partial for htmx requests, the whole page otherwise."""
    name = f"{template}#{partial}" if request.htmx else template
    return render(request, name, context)


def bad_filter(error: Exception) -> NoReturn:
    """Refuse a filter value that is not in the data with the site's 400 page (raises)."""
    raise BadRequest(str(error)) from error


def base_context(filters: Filters, page: str, analysis: Analysis | None = None) -> dict[str, Any]:
    return {
        "filters": filters,
        "options": filters.options,
        "query": filters.query(),
        "page_name": page,
        "analysis": analysis,
        "pages": analysis.pages if analysis else frozenset(),
    }


def _choose(request: HtmxHttpRequest, filters: Filters, message: str = "") -> HttpResponse:
    """The page that asks for a study (no study chosen among several, or none reportable)."""
    context = base_context(filters, "overview") | {"message": message}
    return render_page(request, "reports/choose.html", context)


def page_filters(request: HttpRequest, page: str, *, study: Study | None = None) -> tuple[Filters, Analysis]:
    """The filters of an analysis's own page ``page`` and the analysis of their study: the site's
    400 page for an unknown filter value, Http404 when that analysis has no such page."""
    try:
        filters = parse_filters(request, study=study)
    except BadFilter as error:
        bad_filter(error)
    if filters.study is None:
        raise Http404("Choose a study (?study=...).")
    try:
        analysis = analysis_of(filters.study)
    except (NoAnalysis, AnalysisError) as error:
        raise Http404(str(error)) from error
    if page not in analysis.pages:
        raise Http404(f"Reports of {filters.study.get_protocol_display()} studies have no {page} page.")
    return filters, analysis


# --- pages --------------------------------------------------------------------------------------


@researcher_only
def overview(request: HtmxHttpRequest) -> HttpResponse:
    """The study's report page: its analysis's tables and charts, with coverage and n."""
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return bad_filter(error)
    if filters.study is None:
        return _choose(request, filters)
    try:
        analysis = analysis_of(filters.study)
    except (NoAnalysis, AnalysisError) as error:
        return _choose(request, filters, str(error))
    try:
        own = analysis.overview(filters)
    except AnalysisError as error:  # the report cannot be computed as the filters stand: say why
        own = {"problem": str(error), "report": {}, "tables": {}, "coverage": {}}
    else:
        # The study's own rule (labels per item, agreement), not the paper's three-annotator majority.
        study = filters.study
        own["final_answer_rule"] = consensus.rule_text(needed=study.labels_per_item, rule=study.agreement)
    return render_page(request, analysis.template, base_context(filters, "overview", analysis) | own)


# --- downloads ----------------------------------------------------------------------------------


def _attachment(body: bytes | str, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _download(request: HttpRequest, name: str, what: str) -> tuple[Filters, Analysis]:
    """The filters and analysis of a download of table or chart ``name``; Http404 when the
    analysis has no such ``what``."""
    filters = parse_filters(request)
    try:
        analysis = analysis_of(filters.scope.study)  # BadFilter without a study
    except (NoAnalysis, AnalysisError) as error:
        raise Http404(str(error)) from error
    if name not in getattr(analysis, f"{what}_keys"):
        raise Http404(f"No {what} {name!r}.")
    return filters, analysis


@researcher_only
def table_download(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """Any report table as CSV (raw values), LaTeX (booktabs, escaped) or Markdown."""
    if fmt not in renderers.CONTENT_TYPES:
        raise Http404(f"Tables download as {', '.join(renderers.CONTENT_TYPES)}, not {fmt!r}.")
    try:
        filters, analysis = _download(request, name, "table")
        table = analysis.table(name, filters)
    except UnknownTable as error:
        raise Http404(str(error)) from error
    except (BadFilter, FilterNeeded) as error:
        return bad_filter(error)
    body = renderers.render(table, fmt)
    return _attachment(body, renderers.CONTENT_TYPES[fmt], f"biaslab-{name}-{filters.slug()}.{fmt}")


def _chart(request: HttpRequest, name: str, fmt: str) -> tuple[Filters, str, bytes]:
    """(filters, file stem, bytes) of a chart; Http404, or the site's 400 page for a bad filter.
    Cached like the report."""
    if fmt not in CHART_FORMATS:
        raise Http404(f"Charts download as {' or '.join(CHART_FORMATS)}, not {fmt!r}.")
    try:
        filters, analysis = _download(request, name, "chart")
        source = ""
        if name == "histogram":
            source = request.GET.get("source", "human")
            report = filters.result(bootstrap=0).report
            if source not in ("human", *report.get("detectors", {})):
                raise BadFilter(f"No source {source!r} in the report.")
        body = analysis.chart(name, fmt, filters, source=source)
    except (BadFilter, FilterNeeded) as error:
        bad_filter(error)
    return filters, safe_name(f"{name}-{source}" if source else name), body


@researcher_only
def chart_download(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """Any report chart as SVG or PNG (paper-ready: labelled axes, legend, 200 dpi)."""
    filters, stem, body = _chart(request, name, fmt)
    return _attachment(body, CHART_FORMATS[fmt], f"biaslab-{stem}-{filters.slug()}.{fmt}")


@researcher_only
def chart_image(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """A chart for an <img> in a page, revalidated by its ETag (a hash of the chart)."""
    _filters, _stem, body = _chart(request, name, fmt)
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    response = HttpResponse(body, content_type=CHART_FORMATS[fmt])
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    # 304 (with the ETag and Cache-Control) when If-None-Match names this chart; given a
    # response, it never answers None (the stubs cannot say so).
    return get_conditional_response(request, etag=etag, response=response) or response
