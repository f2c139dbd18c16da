"""The attributes analysis: gender presentation differences (GEP, Zhang et al. 2023)."""

from __future__ import annotations

from typing import Any

from metrics import gep_design
from protocols.attributes import report as attributes_report
from protocols.attributes import tables as atables
from protocols.attributes.report import YES_NO, AttributesResult
from reports.analyses import Analysis, AnalysisError, ReportPage, chart_src, data_version
from reports.selectors import Scope
from studies.models import Question, Study
from studies.selectors import study_questions

#: Chart key -> setting: one GEP vector chart per setting (a T2I model filter narrows it).
CHARTS = {f"gep_{setting}": setting for setting in gep_design.SETTINGS}


def attribute_questions(study: Study) -> list[Question]:
    """The study's questions in screen order; AnalysisError when it has none or when one is
    not answered yes / no (the GEP counts yes answers)."""
    questions = list(study_questions(study))
    if not questions:
        raise AnalysisError(f"Study '{study.slug}' has no question: the GEP report compares yes/no answers.")
    for question in questions:
        if set(question.values) != set(YES_NO):
            raise AnalysisError(
                f"Question '{question.key}' of study '{study.slug}' has the answers "
                f"{', '.join(question.values) or 'none'}; the GEP report needs exactly yes and no."
            )
    return questions


class AttributesAnalysis(Analysis):
    protocol = "attributes"
    title = "Gender presentation differences (GEP): detectors vs human answers"
    template = "attributes/overview.html"
    table_keys = csv_tables = atables.TABLE_KEYS
    builders = atables.BUILDERS
    paper = atables.PAPER
    report_name = "GEP"
    chart_keys = tuple(CHARTS)
    pages = frozenset({"attribute"})

    def check(self, study: Study) -> None:
        attribute_questions(study)

    def compute(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = 0, seed: int = 0
    ) -> AttributesResult:
        """The report and what the pages need (no intervals: ``bootstrap``, ``seed`` and the
        category of ``scope`` are not used)."""
        return attributes_report.compute(
            Scope(scope.study, t2i_model=scope.t2i_model),
            questions=attribute_questions(scope.study),
            labels_per_item=scope.study.labels_per_item,
            detector=detector,
        )

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: AttributesResult = page.result(bootstrap=0)
        version = data_version(page)
        cells = [
            {
                "model": model,
                "setting": setting,
                "human": result.study.cells[model][setting].human,
                "src": chart_src(f"gep_{setting}", page, t2i_model=model, v=version),
                "query": page.query(t2i_model=model),
            }
            for model, setting in atables.setting_cells(result)
        ]
        return {
            "report": result.report,
            "coverage": result.report["coverage"],
            "cells": cells,
            "tables": self.tables(result),
            "questions": [(key, result.questions[key]) for key in result.keys],
            "settings": gep_design.SETTINGS,
        }

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """The GEP vector chart of a setting (``gep_neutral``, ``gep_explicit``): every T2I
        model of the report (one row each), or the one of the T2I model filter."""
        from protocols.attributes import charts

        result: AttributesResult = self.page_result(page)
        return charts.gep_vector_chart(result.report, fmt, setting=CHARTS[name], keys=result.keys)

    def summary(self, result: AttributesResult) -> str:
        cover = result.report["coverage"]
        return f"Items: {cover['items']}, compared: {cover['items_compared']}, left out: {cover['items_left_out']}."
