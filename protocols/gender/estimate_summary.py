"""The estimate as one table per study (a row per T2I model), for ``estimate_bias --format
md|csv`` and the estimate page."""

from __future__ import annotations

from typing import Any

from protocols.gender.estimate_frame import StudyEstimate
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
    # The bias-corrected estimate: the point that lies inside the interval beside it.
    Column("estimate", "Estimate"),
    Column("ci95", "95 % interval", pair=True),
    # The plug-in (eq. 1 on the estimated shares): biased upward when labels are few.
    Column("plug_in", "Plug-in"),
    Column("human_only", "Labels only"),
    Column("human_only_ci95", "Labels-only 95 % interval", pair=True),
    Column("detector_only", "Detector only"),
    Column("lambda", "λ"),
    Column("effective_labels", "Effective labels"),
    Column("n_labelled", "Labelled"),
    Column("n_images", "Images"),
    Column("rounds", "Rounds"),
    Column("labels_for_half_width", "Labels to halve"),
)


def summary_table(estimate: StudyEstimate) -> Table:
    rows = []
    for model in estimate.models:
        body = model.as_json([])
        score, human = body["model_bias_score"], body["human_only"]
        rows.append(
            (
                Cell(model.t2i_model, model.t2i_model),
                _number(score["bias_corrected"]),
                _interval(score["ci95"]),
                _number(score["estimate"]),
                _number(human["bias_corrected"]),
                _interval(human["ci95"]),
                _number(body["detector_only"]),
                _number(body["lambda"], 2),
                _number(body["effective_labels"], 0),
                _count(body["n_labelled"]),
                _count(body["n_images"]),
                _count(body["rounds"]),
                _count(body["labels_for_half_width"]),
            )
        )
    return Table(
        key="bias_estimate",
        title=f"Model bias score estimated from {estimate.detector}@{estimate.version} and sampled labels",
        caption="Estimate: the detector on every image, corrected by the sampled human labels, with the "
        "detector weighted by λ (0: labels alone, 1: the detector's full weight; chosen from the data "
        "to make the interval narrow), bias-corrected by the design bootstrap so that it lies in its 95 % "
        "interval. Plug-in: the same score without that correction (too high when labels are few). "
        "Labels only: the sampled labels alone. Effective labels: how many labels alone would give "
        "the same precision.",
        columns=COLUMNS,
        rows=tuple(rows),
    )
