"""The object co-occurrence analysis (Mannering 2023): which objects a T2I model draws beside
men and beside women, and how far people agree with the detector that counted them."""

from __future__ import annotations

from typing import Any, cast

from protocols.objects import report as objects_report
from protocols.objects import tables as otables
from protocols.objects.report import ObjectsResult
from reports.analyses import Analysis, ReportOption, ReportPage, chart_src, data_version
from reports.selectors import Scope

CHARTS = ("counts",)


class ObjectsAnalysis(Analysis):
    protocol = "objects"
    title = "Object co-occurrence: which objects appear beside men and beside women"
    template = "objects/overview.html"
    table_keys = csv_tables = otables.TABLE_KEYS
    builders = otables.BUILDERS
    paper = otables.PAPER
    report_name = "object co-occurrence"
    chart_keys = CHARTS
    pages = frozenset({"object_class"})
    options = (
        ReportOption(
            flag="--exclude-person",
            help="Object co-occurrence studies: leave the class 'person' out of the table and the χ² test.",
            keyword="include_person",
            studies="object co-occurrence",
            value=False,
        ),
    )

    def compute(
        self,
        scope: Scope,
        *,
        detector: str | None = None,
        bootstrap: int = 0,
        seed: int = 0,
        include_person: bool | None = None,
    ) -> ObjectsResult:
        """The report (``report.compute``); ``bootstrap`` is unused, ``include_person`` None reads the
        study's parameter."""
        return objects_report.compute(
            Scope(scope.study, t2i_model=scope.t2i_model),
            detector=detector,
            include_person=include_person,
            seed=seed,
        )

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: ObjectsResult = page.result(bootstrap=0)
        version = data_version(page)
        models = list(result.models)
        return {
            "report": result.report,
            "result": result,
            "coverage": result.report["coverage"],
            "summary": [
                {
                    "model": model,
                    "entry": result.report["objects"][model],
                    "analysis": result.analysis(model),
                    "confirmed": result.models[model].confirmed,
                }
                for model in models
            ],
            "chart_src": chart_src("counts", page, v=version) if models else "",
            "chart_query": page.query(),
            "tables": self.tables(result),
            "classes": otables.class_totals(result),
        }

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """Figure 2: instances per class by gender, one panel per T2I model of the report."""
        from protocols.objects import charts

        return charts.counts_chart(cast("ObjectsResult", self.page_result(page)).report, fmt)

    def summary(self, result: ObjectsResult) -> str:
        cover = result.report["coverage"]
        person = "counted" if result.include_person else "left out"
        return (
            f"Detector {result.detector}@{result.version}; person {person}. Items: {cover['items']}, "
            f"compared: {cover['items_compared']}, left out: {cover['items_left_out']}, checked by people: "
            f"{cover['items_checked']}."
        )
