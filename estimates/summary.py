"""The estimate as one table per study (a row per T2I model), for ``estimate_bias --format md|csv``
and the estimate page: the reports' table model, so CSV and Markdown come from the reports'
renderers (formula-safe CSV included)."""

from __future__ import annotations

from typing import Any

from estimates.selectors import StudyEstimate
from reports import render
from reports.tables import NO_VALUE, Cell, Column, Table


def _number(value: float | None, digits: int = 3) -> Cell:
    return Cell(value, NO_VALUE if value is None else f"{value:.{digits}f}")


def _interval(ci: Any) -> Cell:
    if ci is None:
        return Cell((None, None), NO_VALUE)
    low, high = float(ci[0]), float(ci[1])
    return Cell((low, high), f"[{low:.3f}, {high:.3f}]")


def _count(value: int | None) -> Cell:
    return Cell(value, NO_VALUE if value is None else str(value))


COLUMNS = (
    Column("t2i_model", "T2I model", numeric=False),
    Column("estimate", "Estimate (PPI)"),
    Column("ci95", "95 % interval", pair=True),
    Column("human_only", "Human only"),
    Column("human_only_ci95", "Human-only 95 % interval", pair=True),
    Column("detector_only", "Detector only"),
    Column("n_images", "Images"),
    Column("n_labelled", "Labelled"),
    Column("rounds", "Rounds"),
    Column("labels_for_half_width", "Labels to halve the interval"),
)


def summary_table(estimate: StudyEstimate) -> Table:
    rows = []
    for model in estimate.models:
        body = model.as_json([])
        rows.append(
            (
                Cell(model.t2i_model, model.t2i_model),
                _number(body["model_bias_score"]["estimate"]),
                _interval(body["model_bias_score"]["ci95"]),
                _number(body["human_only"]["estimate"]),
                _interval(body["human_only"]["ci95"]),
                _number(body["detector_only"]),
                _count(body["n_images"]),
                _count(body["n_labelled"]),
                _count(body["rounds"]),
                _count(body["labels_for_half_width"]),
            )
        )
    return Table(
        key="bias_estimate",
        title=f"Model bias score estimated from {estimate.detector}@{estimate.version} and sampled labels",
        caption="Prediction-powered estimate (detector on every image, corrected by the sampled human "
        "labels) with its 95 % interval, beside the human labels alone and the detector alone.",
        columns=COLUMNS,
        rows=tuple(rows),
    )


def summary_markdown(estimate: StudyEstimate) -> str:
    return render.render(summary_table(estimate), "md")


def summary_csv(estimate: StudyEstimate) -> str:
    return render.render(summary_table(estimate), "csv")
