"""The gender analysis's own pages: prompt heatmap, a prompt's items, a detector's disagreements."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404

from metrics.gender import prompt_bias_score
from protocols.gender import drilldown
from protocols.gender import tables as gtables
from protocols.gender.analysis import GenderAnalysis, coverage, gender_question
from protocols.gender.report import GenderResult
from protocols.gender.selectors import CLEAR_VERDICTS
from reports import views as base
from reports.analyses import chart_src
from reports.tables import NO_VALUE
from studies.models import Prompt
from studies.typing import HtmxHttpRequest

GALLERY_PAGE_SIZE = 24


def _heat_rows(grid: gtables.PromptGrid) -> list[dict[str, Any]]:
    """Rows of the clickable HTML heatmap, coloured like the figure."""
    from protocols.gender import charts

    rows = []
    previous = None
    for row in grid.rows:
        cells = []
        for col in grid.columns:
            score = row.scores.get(col)
            n_m, n_f, n_all = row.counts.get(col, (0, 0, 0))
            cells.append(
                {
                    "score": score,
                    "text": NO_VALUE if score is None else f"{score:.2f}",
                    "colour": charts.diverging_hex(score),
                    "dark": score is not None and abs(score) > 0.6,
                    "title": f"{col[1]} on {col[0]}: {n_m} male, {n_f} female of {n_all} images",
                }
            )
        rows.append({"row": row, "cells": cells, "new_category": row.category != previous})
        previous = row.category
    return rows


@base.researcher_only
def heatmap(request: HtmxHttpRequest) -> HttpResponse:
    """Prompt bias scores, prompts x (T2I model, source) (paper table 7), and their histogram."""
    filters, analysis = base.page_filters(request, "heatmap")
    assert isinstance(analysis, GenderAnalysis)  # only the gender analysis lists this page
    result: GenderResult = filters.result(bootstrap=0)
    report = result.report
    grid = analysis.grid(filters)
    sources = [gtables.HUMAN, *gtables.detector_keys(report)]
    source = request.GET.get("source", gtables.HUMAN)
    if source not in sources:
        source = gtables.HUMAN
    scores = [r.scores.get(c) for r in grid.rows for c in grid.columns if c[1] == source]
    context = base.base_context(filters, "heatmap", analysis) | {
        "grid": grid,
        "heat_rows": _heat_rows(grid),
        "models": gtables.model_keys(report),
        "sources": sources,
        "source": source,
        # Fetched by the browser in parallel with the page, from the same cached report.
        "heatmap_src": chart_src("heatmap", filters),
        "histogram_src": chart_src("histogram", filters, source=source),
        "n_scored": len(scores) - scores.count(None),
        "n_unscored": scores.count(None),
        "coverage": coverage(report),
    }
    return base.render_page(request, "gender/heatmap.html", context)


@base.researcher_only
def prompt_detail(request: HtmxHttpRequest, prompt_id: int) -> HttpResponse:
    """One prompt's items: every annotator's label, the final label, every detector's verdict."""
    prompt = get_object_or_404(Prompt.objects.select_related("study"), pk=prompt_id)
    filters, analysis = base.page_filters(request, "prompt", study=prompt.study)
    result: GenderResult = filters.result(bootstrap=0)
    detectors = [filters.detector] if filters.detector else None
    rows, detector_keys = drilldown.prompt_items(
        prompt=prompt,
        question=gender_question(prompt.study),
        clear=result.clear,
        t2i_model=filters.t2i_model,
        detectors=detectors,
    )
    context = base.base_context(filters, "prompt", analysis) | {
        "prompt": prompt,
        "rows": rows,
        "detector_keys": detector_keys,
        "summary": _prompt_summary(rows, detector_keys, result.clear),
    }
    return base.render_page(request, "gender/prompt.html", context)


def _prompt_summary(
    rows: list[drilldown.ItemRow], detector_keys: list[str], clear: tuple[str, str]
) -> list[dict[str, Any]]:
    """Per T2I model: items, final-label counts and score, each detector's score, from the rows shown."""
    by_model: dict[str, list[drilldown.ItemRow]] = {}
    for row in rows:
        by_model.setdefault(row.item.t2i_model, []).append(row)
    summary = []
    for model, model_rows in by_model.items():
        finals = [r.final.value for r in model_rows if r.final]
        n_m, n_f = finals.count(clear[0]), finals.count(clear[1])
        detector_scores = []
        for key in detector_keys:
            verdicts = [
                p.verdict for r in model_rows if r.final and (p := r.verdicts.get(key)) and p.status == "ok"
            ]
            score = prompt_bias_score(*map(verdicts.count, CLEAR_VERDICTS))
            detector_scores.append({"detector": key, "score": score, "n": len(verdicts)})
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


@base.researcher_only
def detector_detail(request: HtmxHttpRequest, detector: str) -> HttpResponse:
    """One detector: confusion with the human labels and a paginated gallery of disagreements."""
    filters, analysis = base.page_filters(request, "detector")
    if detector not in filters.options.detectors:
        raise Http404(f"No predictions of detector {detector!r}.")
    kind = request.GET.get("kind", "all")
    if kind not in drilldown.DISAGREEMENTS:
        return base.bad_filter(
            base.BadFilter(f"Unknown gallery {kind!r}: use one of {', '.join(drilldown.DISAGREEMENTS)}.")
        )
    result: GenderResult = filters.result(bootstrap=0)
    scope, question = filters.scope, gender_question(filters.scope.study)
    confusion = drilldown.detector_confusion(
        scope, detector=detector, question=question, labels=result.labels, clear=result.clear
    )
    asked: dict[str, Any] = {"detector": detector, "question": question, "clear": result.clear}
    counts = drilldown.disagreement_counts(scope, **asked)
    paginator = Paginator(drilldown.detector_disagreements(scope, **asked, kind=kind), GALLERY_PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    for prediction in page:  # the page's rows (a list once read), with their reason's name
        # For the template only: an attribute the model does not declare.
        prediction.reason_name = drilldown.reason_name(prediction)  # type: ignore[attr-defined]
    context = base.base_context(filters, "detector", analysis) | {
        "detector": detector,
        "confusion": confusion,
        "confusion_table": confusion.table(),
        "confusion_query": urlencode(filters.params(detector=detector)),
        "filtering": confusion.filtering,
        "kinds": [{"key": k, "label": label, "n": counts[k]} for k, label in drilldown.DISAGREEMENTS.items()],
        "kind": kind,
        "page": page,
        "gallery_query": urlencode(filters.params() | {"kind": kind}),
    }
    partial = "gallery" if request.htmx and request.htmx.target == "gallery" else "results"
    return base.render_page(request, "gender/detector.html", context, partial=partial)
