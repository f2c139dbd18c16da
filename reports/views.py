"""The researchers' dashboard: overview (paper tables 1-3, 5, 6), heatmap and histogram (table 7,
figure 3), drill-downs to a prompt's images and to a detector's disagreements, and downloads of
every table (CSV, LaTeX) and chart (SVG, PNG).

Views are thin: check the role, read the filters, ask ``reports.report.bias_report`` (the JSON
contract of issue 4) and ``reports.drilldown`` for data, let ``reports.tables`` and
``reports.charts`` shape it, render. Every page renders its ``results`` partial for htmx
requests (the filter form swaps only that region) and the whole page otherwise.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseNotModified,
)
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from annotate import roles
from annotate.models import Prompt, Study
from reports import charts, drilldown, tables
from reports import selectors as sel
from reports.metrics import prompt_bias_score

View = Callable[..., HttpResponse]
GALLERY_PAGE_SIZE = 24
BOOTSTRAP = 1000
# Reports, grids and charts are cached under the data fingerprint (``reports.selectors.
# data_fingerprint``), so a write through the services shows on the next request; the timeout
# only bounds how long an in-place edit that bypasses them (e.g. a prompt's word changed in the
# Django admin) can go unseen.
CACHE_SECONDS = 600
TABLE_FORMATS = {"csv": "text/csv; charset=utf-8", "tex": "application/x-tex; charset=utf-8"}


# --- permissions --------------------------------------------------------------------------------


def researcher_only(view: View) -> View:
    """Anonymous users go to the login page; logged-in users without the researcher (or admin)
    role get 403 whatever the method; only GET and HEAD exist."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not roles.is_researcher(request.user):
            raise PermissionDenied("Reports are for researchers.")
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        return view(request, *args, **kwargs)

    return wrapped


# --- filters ------------------------------------------------------------------------------------


class BadFilter(ValueError):
    """A filter value that is not in the data (unknown study, model, category or detector)."""


@dataclass(frozen=True)
class Filters:
    study: Study | None
    t2i_model: str | None
    category: str | None
    detector: str | None
    options: drilldown.FilterOptions
    # The data fingerprint, read once per request before anything is computed: a write racing
    # with a computation leaves its result under the older fingerprint, never asked for again.
    fingerprint: tuple[Any, ...] = ()

    def params(self, **overrides: str | None) -> dict[str, str]:
        values = {
            "study": self.study.slug if self.study else None,
            "t2i_model": self.t2i_model,
            "category": self.category,
            "detector": self.detector,
        }
        values.update(overrides)
        return {k: v for k, v in values.items() if v}

    def query(self, **overrides: str | None) -> str:
        """The filters as a query string, for links that keep them (downloads, drill-downs)."""
        return urlencode(self.params(**overrides))

    def slug(self) -> str:
        """A file-name-safe summary of the filters, e.g. "gender-sdxl"."""
        parts = [str(v) for v in self.params().values()]
        return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)) or "all"


def parse_filters(request: HttpRequest) -> Filters:
    """Read study (slug), t2i_model, category and detector from GET; empty means all.

    With a single study in the database, it is the default. Raises BadFilter naming the value.
    """
    slug = request.GET.get("study", "").strip()
    if slug:
        study = Study.objects.filter(slug=slug).first()
        if study is None:
            raise BadFilter(f"There is no study {slug!r}.")
    else:
        studies = list(Study.objects.order_by("id")[:2])
        study = studies[0] if len(studies) == 1 else None
    fingerprint = sel.data_fingerprint()
    # The options scan the predictions (distinct detectors): cached like the report.
    options = _cached(
        fingerprint, "filter_options", lambda: drilldown.filter_options(study=study), study=study and study.pk
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


def _cache_key(fingerprint: tuple[Any, ...], kind: str, **scope: Any) -> str:
    raw = repr((kind, sorted(scope.items()), fingerprint))
    return "reports:" + hashlib.sha256(raw.encode()).hexdigest()


def _cached(fingerprint: tuple[Any, ...], kind: str, compute: Callable[[], Any], **scope: Any) -> Any:
    """``compute()``, cached under (kind, scope, the data fingerprint of this request).

    Any write changes the fingerprint, so a cached value is never shown after the data changed;
    old entries are simply never asked for again (the cache evicts them).
    """
    key = _cache_key(fingerprint, kind, **scope)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, CACHE_SECONDS)
    return value


def _report_scope(filters: Filters) -> dict[str, Any]:
    return {
        "study": filters.study.pk if filters.study else None,
        "t2i_model": filters.t2i_model,
        "detector": filters.detector,
    }


def _report_and_counts(filters: Filters, *, bootstrap: int) -> tuple[dict[str, Any], dict[Any, Any]]:
    """The report of issue 4's JSON contract for the filters (category is applied by the pages)
    and the detectors' per-prompt counts of the heatmap, from one computation.

    Cached per filters and data fingerprint. Asked without intervals (``bootstrap=0``: heatmap,
    tables without intervals), it reuses a cached report with intervals when there is one: only
    the intervals differ, and those callers do not read them.
    """
    from reports import report  # imported here: the report pulls numpy, only the pages need it

    scope = _report_scope(filters)
    if bootstrap == 0:
        full = cache.get(_cache_key(filters.fingerprint, "bias_report", **scope, bootstrap=BOOTSTRAP))
        if full is not None:
            return full

    def compute() -> tuple[dict[str, Any], dict[Any, Any]]:
        return report.bias_report_with_prompt_counts(
            study=filters.study,
            t2i_model=filters.t2i_model,
            detector=filters.detector,
            bootstrap=bootstrap,
            seed=0,
        )

    return _cached(filters.fingerprint, "bias_report", compute, **scope, bootstrap=bootstrap)


def _bias_report(filters: Filters, *, bootstrap: int = BOOTSTRAP) -> dict[str, Any]:
    return _report_and_counts(filters, bootstrap=bootstrap)[0]


def _render(
    request: HttpRequest, template: str, context: dict[str, Any], partial: str = "results"
) -> HttpResponse:
    """The named partial for htmx requests, the whole page otherwise."""
    name = f"{template}#{partial}" if request.htmx else template
    return render(request, name, context)


def _bad_filter(request: HttpRequest, error: BadFilter) -> HttpResponse:
    return HttpResponseBadRequest(f"Bad filter: {error}", content_type="text/plain; charset=utf-8")


def _base_context(filters: Filters, page: str) -> dict[str, Any]:
    return {"filters": filters, "options": filters.options, "query": filters.query(), "page_name": page}


# --- tables and grid ----------------------------------------------------------------------------


def _grid(filters: Filters) -> tables.PromptGrid:
    """Prompts x (T2I model, source) scores (paper table 7), cached like the report."""

    def compute() -> tables.PromptGrid:
        report, counts = _report_and_counts(filters, bootstrap=0)
        return tables.prompt_grid(
            report,
            counts,
            prompt_ids=drilldown.prompt_ids(study=filters.study),
            detectors=tables.detector_keys(report),
            category=filters.category,
        )

    scope = _report_scope(filters) | {"category": filters.category}
    return _cached(filters.fingerprint, "grid", compute, **scope)


def _overview_tables(report: dict[str, Any], filters: Filters) -> list[tables.Table]:
    return [
        tables.model_bias_table(report),
        tables.prompt_difference_table(report),
        tables.filtering_table(report),
        tables.label_shares_table(report),
        tables.categories_table(report, category=filters.category),
    ]


def _coverage(report: dict[str, Any]) -> dict[str, Any]:
    coverage = report.get("coverage", {})
    images = int(coverage.get("images", 0))
    final = int(coverage.get("final_labels", 0))
    return {"images": images, "final_labels": final, "percent": 100 * final / images if images else None}


# --- pages --------------------------------------------------------------------------------------


@researcher_only
def overview(request: HttpRequest) -> HttpResponse:
    """Paper tables 1, 2, 3, 5 and 6 and the model bias chart, with coverage and n."""
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return _bad_filter(request, error)
    report = _bias_report(filters)
    context = _base_context(filters, "overview") | {
        "report": report,
        "coverage": _coverage(report),
        "agreement": report.get("agreement", {}),
        "tables": _overview_tables(report, filters),
        # The chart is an <img> the browser fetches beside the page (same cached report), so
        # drawing it never delays the tables.
        "model_bias_src": _chart_src("model_bias", filters) if report.get("human") else None,
        "detectors": tables.detector_keys(report),
    }
    return _render(request, "reports/overview.html", context)


@dataclass(frozen=True)
class HeatCell:
    score: float | None
    text: str
    colour: str
    dark: bool
    title: str


def _heat_rows(grid: tables.PromptGrid) -> list[dict[str, Any]]:
    """Rows of the clickable HTML heatmap, coloured like the figure."""
    rows = []
    previous = None
    for row in grid.rows:
        cells = []
        for col in grid.columns:
            score = row.scores.get(col)
            n_m, n_f, n_all = row.counts.get(col, (0, 0, 0))
            cells.append(
                HeatCell(
                    score=score,
                    text=tables.NO_VALUE if score is None else f"{score:.2f}",
                    colour=charts.diverging_hex(score),
                    dark=score is not None and abs(score) > 0.6,
                    title=f"{col[1]} on {col[0]}: {n_m} male, {n_f} female of {n_all} images",
                )
            )
        rows.append({"row": row, "cells": cells, "new_category": row.category != previous})
        previous = row.category
    return rows


@researcher_only
def heatmap(request: HttpRequest) -> HttpResponse:
    """Prompt bias scores, prompts x (T2I model, source) (paper table 7), and their histogram."""
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return _bad_filter(request, error)
    report = _bias_report(filters, bootstrap=0)
    grid = _grid(filters)
    sources = [tables.HUMAN, *tables.detector_keys(report)]
    source = request.GET.get("source", tables.HUMAN)
    if source not in sources:
        source = tables.HUMAN
    context = _base_context(filters, "heatmap") | {
        "grid": grid,
        "heat_rows": _heat_rows(grid),
        "models": tables.model_keys(report),
        "sources": sources,
        "source": source,
        # Inline (a data URI of the cached chart) rather than fetched: the browser test reads the
        # figure's size as soon as the table is there. The histogram loads beside the page.
        # Fetched by the browser in parallel with the page, from the same cached report.
        "heatmap_src": _chart_src("heatmap", filters),
        "histogram_src": _chart_src("histogram", filters, source=source),
        "n_scored": sum(
            1 for r in grid.rows for c in grid.columns if c[1] == source and r.scores.get(c) is not None
        ),
        "n_unscored": sum(
            1 for r in grid.rows for c in grid.columns if c[1] == source and r.scores.get(c) is None
        ),
        "coverage": _coverage(report),
    }
    return _render(request, "reports/heatmap.html", context)


def _source_name(source: str) -> str:
    return "human ground truth" if source == tables.HUMAN else source


@researcher_only
def prompt_detail(request: HttpRequest, prompt_id: int) -> HttpResponse:
    """One prompt's images: both annotators' labels, the final label, every detector's verdict."""
    prompt = get_object_or_404(Prompt.objects.select_related("study"), pk=prompt_id)
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return _bad_filter(request, error)
    detectors = [filters.detector] if filters.detector else None
    rows, detector_keys = drilldown.prompt_images(
        prompt=prompt, t2i_model=filters.t2i_model, detectors=detectors
    )
    context = _base_context(filters, "prompt") | {
        "prompt": prompt,
        "rows": rows,
        "detector_keys": detector_keys,
        "summary": _prompt_summary(rows, detector_keys),
    }
    return _render(request, "reports/prompt.html", context)


def _prompt_summary(rows: list[drilldown.ImageRow], detector_keys: list[str]) -> list[dict[str, Any]]:
    """Per T2I model: images, human final-label counts and score, each detector's score.

    The rows are one prompt's images (tens), already loaded for display: counting them here
    costs nothing and keeps the summary exactly what the page shows.
    """
    by_model: dict[str, list[drilldown.ImageRow]] = {}
    for row in rows:
        by_model.setdefault(row.image.t2i_model, []).append(row)
    summary = []
    for model, model_rows in by_model.items():
        finals = [r.final.value for r in model_rows if r.final]
        n_m, n_f = finals.count("male"), finals.count("female")
        detector_scores = []
        for key in detector_keys:
            verdicts = [r.verdicts[key].verdict for r in model_rows if r.verdicts.get(key) and r.final]
            d_m, d_f = verdicts.count("male"), verdicts.count("female")
            detector_scores.append(
                {"detector": key, "score": prompt_bias_score(d_m, d_f), "n": len(verdicts)}
            )
        summary.append(
            {
                "t2i_model": model,
                "n_images": len(model_rows),
                "n_final": len(finals),
                "n_male": n_m,
                "n_female": n_f,
                "n_unclear": len(finals) - n_m - n_f,
                "score": prompt_bias_score(n_m, n_f),
                "detectors": detector_scores,
            }
        )
    return summary


@researcher_only
def detector_detail(request: HttpRequest, detector: str) -> HttpResponse:
    """One detector: confusion with the human labels and a paginated gallery of disagreements."""
    try:
        filters = parse_filters(request)
    except BadFilter as error:
        return _bad_filter(request, error)
    if detector not in filters.options.detectors:
        raise Http404(f"No predictions of detector {detector!r}.")
    kind = request.GET.get("kind", "all")
    if kind not in drilldown.DISAGREEMENTS:
        return HttpResponseBadRequest(
            f"Unknown gallery {kind!r}: use one of {', '.join(drilldown.DISAGREEMENTS)}.",
            content_type="text/plain; charset=utf-8",
        )
    scope = {"study": filters.study, "t2i_model": filters.t2i_model, "category": filters.category}
    confusion = drilldown.detector_confusion(detector=detector, **scope)
    counts = drilldown.disagreement_counts(detector=detector, **scope)
    paginator = Paginator(
        drilldown.detector_disagreements(detector=detector, kind=kind, **scope), GALLERY_PAGE_SIZE
    )
    page = paginator.get_page(request.GET.get("page"))
    context = _base_context(filters, "detector") | {
        "detector": detector,
        "confusion": confusion,
        "confusion_table": tables.confusion_table(
            detector, confusion.counts, human_labels=confusion.human_labels, verdicts=drilldown.VERDICTS
        ),
        "filtering": confusion.filtering,
        "gender": confusion.gender,
        "kinds": [{"key": k, "label": label, "n": counts[k]} for k, label in drilldown.DISAGREEMENTS.items()],
        "kind": kind,
        "page": page,
        "gallery_query": urlencode(filters.params() | {"kind": kind}),
    }
    partial = "gallery" if request.htmx and request.htmx.target == "gallery" else "results"
    return _render(request, "reports/detector.html", context, partial=partial)


# --- downloads ----------------------------------------------------------------------------------


def _attachment(body: bytes | str, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _table(name: str, request: HttpRequest, filters: Filters) -> tables.Table:
    if name == "confusion":
        if not filters.detector:
            raise BadFilter("The confusion table needs a detector filter (?detector=...).")
        confusion = drilldown.detector_confusion(
            detector=filters.detector,
            study=filters.study,
            t2i_model=filters.t2i_model,
            category=filters.category,
        )
        return tables.confusion_table(
            filters.detector,
            confusion.counts,
            human_labels=confusion.human_labels,
            verdicts=drilldown.VERDICTS,
        )
    if name == "prompt_scores":
        return tables.prompt_scores_table(_grid(filters))
    # Only table 1 shows bootstrap intervals; the others skip the resampling (the slow part).
    report = _bias_report(filters, bootstrap=BOOTSTRAP if name == "model_bias" else 0)
    return next(t for t in _overview_tables(report, filters) if t.key == name)


@researcher_only
def table_download(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """Any dashboard table as CSV (raw values) or LaTeX (booktabs, escaped)."""
    if fmt not in TABLE_FORMATS:
        raise Http404(f"Tables download as {' or '.join(TABLE_FORMATS)}, not {fmt!r}.")
    if name not in (*tables.TABLE_KEYS, "confusion"):
        raise Http404(f"No table {name!r}.")
    try:
        filters = parse_filters(request)
        table = _table(name, request, filters)
    except BadFilter as error:
        return _bad_filter(request, error)
    body = tables.to_csv(table) if fmt == "csv" else tables.to_latex(table)
    return _attachment(body, TABLE_FORMATS[fmt], f"biaslab-{name}-{filters.slug()}.{fmt}")


def _chart_src(name: str, filters: Filters, **extra: str) -> str:
    """URL of a chart drawn for display in the page (``chart_image``), with the page's filters."""
    query = urlencode(filters.params() | extra)
    return reverse("reports:chart_image", args=[name, "svg"]) + (f"?{query}" if query else "")


def _chart_bytes(filters: Filters, name: str, fmt: str, source: str = "") -> bytes:
    """A chart's file bytes, drawn once per filters and data fingerprint."""

    def draw() -> bytes:
        if name == "model_bias":
            return charts.model_bias_chart(_bias_report(filters), fmt)
        grid = _grid(filters)
        if name == "heatmap":
            return charts.heatmap_chart(grid, fmt)
        return charts.histogram_chart(grid.source_scores(source), fmt, source=_source_name(source))

    scope = _report_scope(filters) | {
        "category": filters.category,
        "name": name,
        "fmt": fmt,
        "source": source,
    }
    return _cached(filters.fingerprint, "chart", draw, **scope)


def _chart(request: HttpRequest, name: str, fmt: str) -> tuple[Filters, str, bytes]:
    """(filters, file stem, bytes) of a chart; raises Http404 / BadFilter. Cached like the report."""
    if fmt not in charts.FORMATS:
        raise Http404(f"Charts download as {' or '.join(charts.FORMATS)}, not {fmt!r}.")
    if name not in charts.CHART_KEYS:
        raise Http404(f"No chart {name!r}.")
    filters = parse_filters(request)
    source = ""
    if name == "histogram":
        source = request.GET.get("source", tables.HUMAN)
        if source not in (tables.HUMAN, *tables.detector_keys(_bias_report(filters, bootstrap=0))):
            raise BadFilter(f"No source {source!r} in the report.")
    body = _chart_bytes(filters, name, fmt, source)
    return filters, f"{name}-{source}" if source else name, body


@researcher_only
def chart_download(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """Any dashboard chart as SVG or PNG (paper-ready: labelled axes, legend, 200 dpi)."""
    try:
        filters, stem, body = _chart(request, name, fmt)
    except BadFilter as error:
        return _bad_filter(request, error)
    return _attachment(body, charts.FORMATS[fmt], f"biaslab-{stem}-{filters.slug()}.{fmt}")


@researcher_only
def chart_image(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """A chart for an <img> in a page: the same bytes as the download, shown inline.

    The URL does not change with the data, so the browser must revalidate (``no-cache``); the
    ETag is the chart's cache key, so an unchanged chart costs a 304 and no drawing.
    """
    try:
        _filters, _stem, body = _chart(request, name, fmt)
    except BadFilter as error:
        return _bad_filter(request, error)
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == etag:
        response: HttpResponse = HttpResponseNotModified()
    else:
        response = HttpResponse(body, content_type=charts.FORMATS[fmt])
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    return response
