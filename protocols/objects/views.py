"""The object co-occurrence analysis's own page: a COCO class's counts per T2I model and gender,
and its images with the detector's boxes and what people answered about them."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse

from metrics.coco_names import UnknownClassName, normalise_class_name
from metrics.objects import GENDERS
from protocols.objects import selectors as osel
from protocols.objects.report import ObjectsResult
from reports import views as base
from reports.analyses import AnalysisError
from reports.selectors import Scope
from studies.typing import HtmxHttpRequest

# Images shown per (T2I model, gender) group: beyond it the page says how many more.
GROUP_LIMIT = 60


def _summary(result: ObjectsResult, name: str) -> list[dict[str, Any]]:
    """Per T2I model: the class's instances by gender, its residual and its human check."""
    rows = []
    for model, m in result.models.items():
        stats = result.analysis(model).contingency.per_class.get(name)
        check = (m.human or {}).get(name)
        rows.append(
            {
                "model": model,
                "male": stats.counts.male if stats else 0,
                "female": stats.counts.female if stats else 0,
                "residual": stats.residual.male if stats else None,
                "check": check,
            }
        )
    return rows


def _drawn(row: osel.ClassItem, name: str) -> dict[str, Any]:
    """The image's boxes as the template draws them (SVG in image pixels), the class's first."""
    image = row.image
    width, height = (image.width, image.height) if image is not None else (1, 1)
    font = max(1, round(max(width, height) / 30))
    boxes = []
    for instance in row.instances:
        x0, y0, x1, y1 = (float(v) for v in instance["box"])
        boxes.append(
            {
                "class": instance.get("class", ""),
                "focus": instance.get("class") == name,
                "x": round(x0, 2),
                "y": round(y0, 2),
                "width": round(x1 - x0, 2),
                "height": round(y1 - y0, 2),
                "label_y": round(y0 - font * 0.3 if y0 > font else y0 + font, 2),
            }
        )
    boxes.sort(key=lambda b: b["focus"])  # the class's boxes drawn last, on top
    checked = row.checked or ()
    return {
        "row": row,
        "width": width,
        "height": height,
        "font": font,
        "boxes": boxes,
        "n_confirmed": sum(1 for a in checked if a == osel.CONFIRMED),
        "n_rejected": sum(1 for a in checked if a == osel.REJECTED),
    }


@base.researcher_only
def class_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """One COCO class: its counts and human check per T2I model, and its images with their
    boxes, grouped by T2I model and gender."""
    filters, analysis = base.page_filters(request, "object_class")
    try:
        name = normalise_class_name(name)
    except UnknownClassName as error:
        raise Http404(str(error)) from error
    try:
        result: ObjectsResult = filters.result(bootstrap=0)
    except AnalysisError as error:
        return base.bad_filter(error)
    rows = osel.class_items(
        Scope(filters.scope.study, t2i_model=filters.t2i_model),
        name=name,
        detector=result.detector,
        version=result.version,
    )
    groups = []
    for model in dict.fromkeys(row.t2i_model for row in rows):
        for gender in GENDERS:
            members = [r for r in rows if r.t2i_model == model and r.gender == gender]
            groups.append(
                {
                    "model": model,
                    "gender": gender,
                    "rows": [_drawn(r, name) for r in members[:GROUP_LIMIT]],
                    "n": len(members),
                    "n_instances": sum(r.n_class for r in members),
                    "more": max(0, len(members) - GROUP_LIMIT),
                }
            )
    context = base.base_context(filters, "object_class", analysis) | {
        "name": name,
        "result": result,
        "summary": _summary(result, name),
        "groups": groups,
        "n_rows": len(rows),
    }
    return base.render_page(request, "objects/class.html", context)
