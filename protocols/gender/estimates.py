"""The gender protocol's few-label estimate: the model bias score per T2I model from
``metrics.ppi``; frame and designs in ``estimate_frame``."""

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
from protocols.gender.estimate_summary import summary_table
from reports import render
from studies.models import Study


@dataclass(frozen=True)
class GenderReport:
    estimate: StudyEstimate

    @property
    def version(self) -> str:
        return self.estimate.version

    def page_context(self) -> dict[str, Any]:
        """What the estimate page shows: the summary table, the width chart, pending rounds,
        the prompt tables and the warnings."""
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
        """The API's body (the gender estimate's shape): the contract per model under ``models``."""
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
        rows: list[dict[str, Any]] = [
            {
                "prompt": str(key),
                "estimate": p.estimate,
                "ci95": p.ci95,
                "n_images": p.n_images,
                "n_labelled": p.n_labelled,
                "warning": p.warning or "",
            }
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
