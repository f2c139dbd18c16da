"""The attributes analysis's own page: an attribute's images in one setting, grouped by T2I
model, gender and final answer, with its figures and its dispute queue."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404

from annotate.selectors import dispute_queue
from metrics import gep_design
from protocols.attributes import selectors as asel
from protocols.attributes.report import AttributesResult
from protocols.attributes.tables import signed
from reports import views as base
from reports.selectors import Scope
from studies.models import Question
from studies.typing import HtmxHttpRequest

# Images shown per (T2I model, gender, answer) group: beyond it the page says how many more.
GROUP_LIMIT = 120
ANSWERS = ((gep_design.YES, "Yes"), (gep_design.NO, "No"), (None, "No final answer yet"))


def _summary(result: AttributesResult, key: str, setting: str, models: list[str]) -> list[dict[str, Any]]:
    """Per T2I model: the human frequencies and vector entry of the attribute, and per
    detector its mean scores, vector entry and ROC-AUC (this setting)."""
    summary = []
    for model in models:
        cell = result.study.cells.get(model, {}).get(setting)
        if cell is None:
            continue
        human = cell.human
        summary.append(
            {
                "model": model,
                "f_woman": human.frequencies[gep_design.WOMAN][key],
                "f_man": human.frequencies[gep_design.MAN][key],
                "n_woman": f"{human.n_yes[gep_design.WOMAN][key]} of {human.n_answered[gep_design.WOMAN][key]}",
                "n_man": f"{human.n_yes[gep_design.MAN][key]} of {human.n_answered[gep_design.MAN][key]}",
                "vector": signed(human.gep_vector[key]),
                "missing": sum(human.n_without_final_answer[g][key] for g in gep_design.GENDERS),
                "detectors": [
                    {
                        "name": name,
                        "mean_woman": d.gep.mean_scores[gep_design.WOMAN][key],
                        "mean_man": d.gep.mean_scores[gep_design.MAN][key],
                        "vector": signed(d.gep.gep_vector[key], 4),
                        "roc_auc": d.roc_auc.by_attribute[key],
                    }
                    for name, d in cell.detectors.items()
                ],
            }
        )
    return summary


def _groups(found: asel.AttributeItems) -> list[dict[str, Any]]:
    """The rows by (T2I model, gender, final answer), in that order, with each group's size
    (the selector reads at most GROUP_LIMIT rows of a group)."""
    rows: dict[tuple[str, str, str | None], list[asel.AttributeItem]] = {}
    for r in found.rows:
        rows.setdefault((r.item.t2i_model, r.gender, r.final), []).append(r)
    groups = []
    for model in sorted({model for model, _, _ in found.counts}):
        for gender in gep_design.GENDERS:
            for answer, name in ANSWERS:
                n = found.counts.get((model, gender, answer), 0)
                if not n and answer is None:
                    continue  # "no final answer yet" only when there is such an image
                members = rows.get((model, gender, answer), [])
                groups.append(
                    {
                        "model": model,
                        "gender": gender,
                        "answer": answer or "none",
                        "name": name,
                        "rows": members,
                        "n": n,
                        "more": max(0, n - len(members)),
                    }
                )
    return groups


@base.researcher_only
def attribute_detail(request: HtmxHttpRequest, key: str, setting: str) -> HttpResponse:
    """One attribute in one setting: its figures, its images (yes / no, women / men) with every
    answer and score, and its dispute queue."""
    filters, analysis = base.page_filters(request, "attribute")
    if setting not in gep_design.SETTINGS:
        raise Http404(f"No setting {setting!r}: use one of {', '.join(gep_design.SETTINGS)}.")
    study = filters.scope.study
    question = get_object_or_404(Question, study=study, key=key)
    result: AttributesResult = filters.result(bootstrap=0)
    found = asel.attribute_items(
        Scope(study, t2i_model=filters.t2i_model),
        question=question,
        setting=setting,
        versions=result.versions,
        limit=GROUP_LIMIT,
    )
    models = [filters.t2i_model] if filters.t2i_model else list(result.models)
    disputes = [
        row
        for row in dispute_queue(study=study)
        if row.question.key == key
        and (not filters.t2i_model or row.item.t2i_model == filters.t2i_model)
        and str(row.item.metadata.get("setting", "")) == setting
    ]
    context = base.base_context(filters, "attribute", analysis) | {
        "question": question,
        "setting": setting,
        "settings": gep_design.SETTINGS,
        "keys": result.keys,
        "summary": _summary(result, key, setting, models),
        "groups": _groups(found),
        "n_rows": found.n_items,
        "detectors": list(result.versions),
        "disputes": disputes,
    }
    return base.render_page(request, "attributes/attribute.html", context)
