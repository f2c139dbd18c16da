"""The gender protocol's few-label estimate (issue 13), registered with ``estimates.estimands``:
the model bias score per T2I model from ``metrics.ppi`` (its own ratio estimator and design
bootstrap), unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from detectors.models import OutputKind
from estimates.estimands import EstimandProtocol, register
from estimates.models import Design
from estimates.selectors import StudyEstimate, bias_estimate
from estimates.summary import summary_csv, summary_markdown
from studies.models import Study


@dataclass(frozen=True)
class GenderReport:
    estimate: StudyEstimate

    def as_json(self) -> dict[str, Any]:
        return self.estimate.as_json()

    def markdown(self) -> str:
        return summary_markdown(self.estimate)

    def csv(self) -> str:
        return summary_csv(self.estimate)

    def pending_messages(self) -> list[str]:
        return [
            f"Round {state.round.number} is pending: {len(state.pending)} selected image(s) without a final label."
            for state in self.estimate.pending
        ]


def gender_report(study: Study, detector: str, *, n_boot: int = 1000, seed: int = 0) -> GenderReport:
    return GenderReport(bias_estimate(study, detector, n_boot=n_boot, seed=seed))


GENDER = register(
    EstimandProtocol(
        key="gender",
        output_kind=OutputKind.GENDER.value,
        designs=(Design.UNIFORM.value, Design.ACTIVE.value),
        report=gender_report,
    )
)
