"""The questions protocol's analysis: the JSON report, its csv / md exports and the overview
page's context."""

from __future__ import annotations

from typing import Any

from protocols.questions import charts
from protocols.questions import report as qreport
from protocols.questions import tables as qtables
from protocols.questions.report import QuestionsResult
from protocols.questions.selectors import compare_column
from reports import render
from reports.analyses import Analysis, AnalysisError, ReportPage, chart_src
from reports.selectors import Scope
from studies.models import Question, Study
from studies.selectors import study_questions


def choice_questions(study: Study) -> list[Question]:
    """The study's questions; AnalysisError when it has none or compares no column."""
    questions = list(study_questions(study))
    if not questions:
        raise AnalysisError(f"Study '{study.slug}' has no question to report on.")
    if not compare_column(study):
        raise AnalysisError(
            f"Study '{study.slug}' compares no manifest column: define it with create_study --compare COLUMN."
        )
    return questions


def _choices(question: Question) -> list[tuple[str, str]]:
    """The question's (value, display name) in screen order."""
    return [(str(c["value"]), str(c.get("name", c["value"]))) for c in question.choices]


class QuestionsAnalysis(Analysis):
    protocol = "questions"
    title = "Answer shares per group"
    template = "questions/overview.html"
    pages = frozenset({"question_answer"})
    csv_tables = ("shares", "tests", "agreement", "detectors")
    table_keys = qtables.TABLE_KEYS
    builders = qtables.BUILDERS
    chart_keys = ("shares", "reliability")

    def check(self, study: Study) -> None:
        choice_questions(study)

    def compute(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = 0, seed: int = 0
    ) -> QuestionsResult:
        """The report (Wilson intervals: ``bootstrap``, ``seed`` and the category of ``scope``
        are not used)."""
        return qreport.compute(
            Scope(scope.study, t2i_model=scope.t2i_model),
            questions=choice_questions(scope.study),
            detector=detector,
        )

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: QuestionsResult = page.result(bootstrap=0)
        sections = []
        for question in result.questions:
            choices = _choices(question)
            panels = [
                {
                    "model": model,
                    "cell": cell,
                    "chart": charts.shares_chart(cell, choices),
                    "judges": list(cell["judges"].items()),
                }
                for model, cell in result.report["questions"][question.key].items()
            ]
            sections.append(
                {
                    "question": question,
                    "choices": choices,
                    "legend": [
                        (name, charts.PALETTE[i % len(charts.PALETTE)]) for i, (_, name) in enumerate(choices)
                    ],
                    "panels": panels,
                    "agreement": result.report["agreement"][question.key],
                    "judges": [
                        (name, by_question[question.key])
                        for name, by_question in result.report["judges"].items()
                        if question.key in by_question
                    ],
                }
            )
        has_probabilities = any(
            d.get("reliability")
            for by_question in result.report["judges"].values()
            for d in by_question.values()
        )
        return {
            "report": result.report,
            "result": result,
            "sections": sections,
            "column": result.column,
            "tables": self.tables(result),
            "chart_keys": self.chart_keys,
            "reliability_src": chart_src("reliability", page) if has_probabilities else "",
        }

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """``shares``: every question and T2I model (the filter narrows to one), people beside
        each judge; ``reliability``: each judge's reliability diagram per question."""
        result: QuestionsResult = self.page_result(page)
        if name == "reliability":
            return charts.reliability_figure(result.report, fmt)
        return charts.shares_figure(result.report, [(q.key, _choices(q)) for q in result.questions], fmt)

    def export(self, result: QuestionsResult, fmt: str) -> str:
        if fmt == "csv":
            return render.csv_text(qreport.csv_rows(result))
        if fmt == "md":
            text = qreport.markdown(result)
            if result.report["judges"]:
                keys = ["judges", "question_tests"] + (
                    ["judge_versions"] if result.report["judge_versions"] else []
                )
                text += "\n".join(render.to_markdown(qtables.BUILDERS[key](result)) for key in keys)
            return text
        raise ValueError(f"The questions report exports as csv or md, not {fmt!r}.")
