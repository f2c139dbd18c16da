"""The toy analysis: final ``mood`` answers counted per T2I model, each detector's ``mood``
outputs counted, and how many of them match the final answer."""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from annotate.models import FinalLabel
from reports.analyses import Analysis, ReportPage
from reports.selectors import PREDICTION_TO_ITEM, Scope, predictions_in_scope
from tests.toy_protocol.spec import KIND_MOOD, MOODS


@dataclass(frozen=True)
class ToyResult:
    report: dict[str, Any]


class ToyAnalysis(Analysis):
    protocol: ClassVar[str] = "toy"
    title: ClassVar[str] = "Moods per model"
    template: ClassVar[str] = "toy/overview.html"
    csv_tables: ClassVar[tuple[str, ...]] = ("final",)

    def compute(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = 0, seed: int = 0
    ) -> ToyResult:
        finals: dict[str, Counter[str]] = {}
        final_of: dict[int, str] = {}
        rows = FinalLabel.objects.filter(scope.q("item__"), question__key="mood")
        for item_id, model, value in rows.values_list("item_id", "item__t2i_model", "value"):
            finals.setdefault(model, Counter())[value] += 1
            final_of[item_id] = value
        detectors: dict[str, dict[str, int]] = {}
        predictions = predictions_in_scope(scope, kinds=(KIND_MOOD,), detector=detector)
        for name, item_id, output in predictions.values_list("detector", PREDICTION_TO_ITEM + "id", "output"):
            counts = detectors.setdefault(name, {"n": 0, "agrees": 0, **dict.fromkeys(MOODS, 0)})
            counts[output["mood"]] += 1
            if item_id in final_of:
                counts["n"] += 1
                counts["agrees"] += output["mood"] == final_of[item_id]
        report = {
            "final": {
                model: {mood: counts[mood] for mood in MOODS} for model, counts in sorted(finals.items())
            },
            "detectors": dict(sorted(detectors.items())),
        }
        return ToyResult(report)

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: ToyResult = page.result(bootstrap=0)
        return {"report": result.report, "moods": MOODS}

    def export(self, result: ToyResult, fmt: str) -> str:
        if fmt != "csv":
            raise ValueError(f"The toy report exports as csv, not {fmt!r}.")
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["t2i_model", *MOODS])
        for model, counts in result.report["final"].items():
            writer.writerow([model, *(counts[mood] for mood in MOODS)])
        return out.getvalue()
