"""The gender protocol's few-label estimate of the model bias score per T2I model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from detectors.kinds import KIND_GENDER
from estimates.charts import data_uri
from estimates.estimands import EstimandProtocol
from estimates.report import pending_message
from protocols.gender.estimate_frame import (
    StudyEstimate,
    bias_estimate,
    design_pi,
    humans,
    labelled,
    verdicts,
    width_chart_svg,
)
from reports import render
from reports.tables import Table, ci_field, num_field, raw_cell, text_field, value_field
from studies.models import Study

FIELDS = (
    text_field("t2i_model", "T2I model"),
    # The bias-corrected estimate: the point that lies inside the interval beside it.
    num_field("estimate", "Estimate", ("model_bias_score", "bias_corrected")),
    ci_field("ci95", "95 % interval", ("model_bias_score", "ci95"), 3),
    # The plug-in (eq. 1 on the estimated shares): biased upward when labels are few.
    num_field("plug_in", "Plug-in", ("model_bias_score", "estimate")),
    num_field("human_only", "Labels only", ("human_only", "bias_corrected")),
    ci_field("human_only_ci95", "Labels-only 95 % interval", ("human_only", "ci95"), 3),
    num_field("detector_only", "Detector only"),
    num_field("lambda", "λ", digits=2),
    num_field("effective_labels", "Effective labels", digits=0),
    *(
        value_field(key, label, raw_cell)
        for key, label in (
            ("n_labelled", "Labelled"),
            ("n_images", "Images"),
            ("rounds", "Rounds"),
            ("labels_for_half_width", "Labels to halve"),
        )
    ),
)


def summary_table(estimate: StudyEstimate) -> Table:
    """The estimate as one table (a row per T2I model), for ``estimate_bias --format md|csv`` and the page."""
    return Table.of(
        "bias_estimate",
        f"Model bias score estimated from {estimate.detector}@{estimate.version} and sampled labels",
        "Estimate: the detector on every image, corrected by the sampled human labels, with the "
        "detector weighted by λ (0: labels alone, 1: the detector's full weight; chosen from the data "
        "to make the interval narrow), bias-corrected by the design bootstrap so that it lies in its 95 % "
        "interval. Plug-in: the same score without that correction (too high when labels are few). "
        "Labels only: the sampled labels alone. Effective labels: how many labels alone would give "
        "the same precision.",
        FIELDS,
        (model.as_json([]) | {"t2i_model": model.t2i_model} for model in estimate.models),
    )


@dataclass(frozen=True)
class GenderReport:
    estimate: StudyEstimate

    @property
    def version(self) -> str:
        return self.estimate.version

    def page_context(self) -> dict[str, Any]:
        svg = width_chart_svg(self.estimate.models)
        return {
            "estimate": self.estimate,
            "table": summary_table(self.estimate),
            "chart_src": data_uri(svg) if svg else None,
            "pending": self.estimate.pending_json(),
            "prompt_tables": _prompt_tables(self.estimate),
            "warnings": sorted({w for m in self.estimate.models for w in m.warnings}),
        }

    def as_json(self) -> dict[str, Any]:
        return self.estimate.as_json()

    def api_json(self) -> dict[str, Any]:
        """The API's body: the contract per model under ``models``."""
        e = self.estimate
        return {"detector": e.detector, "version": e.version, "models": e.as_json()}

    def markdown(self) -> str:
        return render.render(summary_table(self.estimate), "md")

    def csv(self) -> str:
        return render.render(summary_table(self.estimate), "csv")

    def pending_messages(self) -> list[str]:
        return [pending_message(p, "image(s)") for p in self.estimate.pending_json()]


def _prompt_tables(estimate: StudyEstimate) -> list[dict[str, Any]]:
    """Per T2I model, its prompts' estimates with intervals, most male first (no score last)."""
    tables = []
    for model in estimate.models:
        if model.estimate is None:
            continue
        rows = [
            {"prompt": str(key), "warning": p.warning or ""}
            | {k: getattr(p, k) for k in ("estimate", "ci95", "n_images", "n_labelled")}
            for key, p in model.estimate.prompts.items()
        ]
        rows.sort(key=lambda r: (r["estimate"] is None, -(r["estimate"] or 0.0), r["prompt"]))
        tables.append({"t2i_model": model.t2i_model, "rows": rows})
    return tables


def gender_report(
    study: Study, detector: str, *, n_boot: int = 1000, seed: int = 0, history: bool = False
) -> GenderReport:
    """``history``: the page's width-against-labels chart (an estimate per round)."""
    return GenderReport(bias_estimate(study, detector, n_boot=n_boot, seed=seed, history=history))


ESTIMAND = EstimandProtocol(
    key="gender",
    output_kind=KIND_GENDER,
    report=gender_report,
    labelled=labelled,
    humans=humans,
    verdicts=verdicts,
    design_pi=design_pi,
)
