"""The gender analysis (Lyu et al. 2025): detectors against the human ground truth."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from protocols.gender import report as gender_report
from protocols.gender import tables as gtables
from protocols.gender.report import GenderResult
from protocols.gender.selectors import GENDER_QUESTION
from reports import judges, render
from reports.analyses import Analysis, AnalysisError, FilterNeeded, ReportPage, chart_src
from reports.selectors import Scope
from reports.tables import Table, UnknownTable, num
from studies.models import Question, Study

BOOTSTRAP = 1000
PAPER = {
    "model_bias": "table 1",
    "prompt_difference": "table 2",
    "filtering": "table 3",
    "label_shares": "table 5",
    "categories": "table 6",
    "prompt_scores": "table 7",
}

#: The judges tables of a gender report.
JUDGE_TABLES = judges.table_builders()


def gender_question(study: Study) -> Question:
    """The study's ``gender`` question; AnalysisError unless it exists with exactly two clear answers."""
    question = Question.objects.filter(study=study, key=GENDER_QUESTION).first()
    if question is None:
        raise AnalysisError(
            f"Study '{study.slug}' has no question with key '{GENDER_QUESTION}', which the gender "
            "report reads."
        )
    if len(question.clear_values) != 2:
        raise AnalysisError(
            f"The '{GENDER_QUESTION}' question of study '{study.slug}' marks "
            f"{len(question.clear_values)} choices as clear ({', '.join(question.clear_values) or 'none'}); "
            "the bias scores need exactly two (the two genders they compare)."
        )
    return question


#: The overview's tables, in page order (``tables.OVERVIEW_KEYS``), from ``compute``'s result.
BUILDERS: dict[str, Callable[[GenderResult], Table]] = {
    "model_bias": lambda r: gtables.model_bias_table(r.report, labels=r.labels, clear=r.clear),
    "prompt_difference": lambda r: gtables.prompt_difference_table(r.report),
    "filtering": lambda r: gtables.filtering_table(r.report),
    "label_shares": lambda r: gtables.label_shares_table(r.report, labels=r.labels, clear=r.clear),
    "categories": lambda r: gtables.categories_table(r.report, category=r.category),
}


class GenderAnalysis(Analysis):
    protocol = "gender"
    title = "Gender bias: detectors vs human ground truth"
    template = "gender/overview.html"
    table_keys = gtables.TABLE_KEYS
    csv_tables = ("models", "detectors", "prompts")
    chart_keys = ("model_bias", "heatmap", "histogram")
    pages = frozenset({"heatmap", "prompt", "detector"})
    builders = BUILDERS
    paper = PAPER
    # Every figure is a mean over prompts or a count over images: a category is a report of its own.
    category_applies = True

    def check(self, study: Study) -> None:
        gender_question(study)

    def compute(
        self, scope: Scope, *, detector: str | None = None, bootstrap: int = BOOTSTRAP, seed: int = 0
    ) -> GenderResult:
        """The report and what the pages need, from one read (JSON: docs/reference/contracts.md)."""
        question = gender_question(scope.study)
        return gender_report.compute(
            scope, question=question, detector=detector, bootstrap=bootstrap, seed=seed
        )

    def overview(self, page: ReportPage) -> dict[str, Any]:
        result: GenderResult = page.result(bootstrap=BOOTSTRAP)
        report = result.report
        return {
            "report": report,
            "coverage": coverage(report),
            "agreement": report.get("agreement", {}),
            "tables": list(self.tables(result).values()),
            "judge_tables": [
                build(result)
                for key, build in JUDGE_TABLES.items()
                if key == "judges" or report["judge_versions"]
            ],
            "detectors": gtables.detector_keys(report),
            # An <img> the browser fetches beside the page, so drawing it never delays the tables.
            "model_bias_src": chart_src("model_bias", page) if report.get("human") else "",
        }

    def grid(self, page: ReportPage) -> gtables.PromptGrid:
        """Prompts x (T2I model, source) scores (paper table 7), cached like the report."""
        return page.cached("grid", lambda: page.result(bootstrap=0).grid())

    def table(self, name: str, page: ReportPage) -> Table:
        """A downloadable table; FilterNeeded for the confusion table without a detector."""
        if name == "confusion":
            from protocols.gender import drilldown

            if not page.detector:
                raise FilterNeeded("The confusion table needs a detector filter (?detector=...).")
            result: GenderResult = page.result(bootstrap=0)
            question = gender_question(page.scope.study)
            return drilldown.detector_confusion(
                page.scope,
                detector=page.detector,
                question=question,
                labels=result.labels,
                clear=result.clear,
            ).table()
        if name == "prompt_scores":
            return gtables.prompt_scores_table(self.grid(page))
        builders = {**self.builders, **JUDGE_TABLES}
        if name not in builders:
            raise UnknownTable(f"No table {name!r}.")
        # Only table 1 shows bootstrap intervals; the others skip the resampling (the slow part).
        return builders[name](page.result(bootstrap=BOOTSTRAP if name == "model_bias" else 0))

    def draw(self, name: str, fmt: str, page: ReportPage, *, source: str = "") -> bytes:
        """The model bias bar chart, the heatmap, or the histogram of ``source``'s prompt scores."""
        from protocols.gender import charts  # matplotlib and its helpers load only when a chart is drawn

        if name == "model_bias":
            return charts.model_bias_chart(page.result(bootstrap=BOOTSTRAP).report, fmt)
        grid = self.grid(page)
        if name == "heatmap":
            return charts.heatmap_chart(grid, fmt)
        shown = "human ground truth" if source == gtables.HUMAN else source
        return charts.histogram_chart(grid.source_scores(source), fmt, source=shown)

    def export(self, result: GenderResult, fmt: str) -> str:
        """``bias_report --format csv`` (sections ``models``, ``detectors``, ``prompts``) or ``md``."""
        if fmt == "csv":
            return "\n".join(
                render.to_csv(t) for t in gtables.export_tables(result.report, labels=result.labels)
            )
        if fmt == "md":
            return markdown(self, result)
        raise ValueError(f"The gender report exports as csv or md, not {fmt!r}.")


def coverage(report: Mapping[str, Any]) -> dict[str, Any]:
    """Items in the report, with a final label, and the share in percent (None without items)."""
    cover = report.get("coverage", {})
    images = int(cover.get("images", 0))
    final = int(cover.get("final_labels", 0))
    return {"images": images, "final_labels": final, "percent": 100 * final / images if images else None}


def markdown(analysis: GenderAnalysis, result: GenderResult) -> str:
    """The report as Markdown: coverage and agreement, then the paper's tables 1, 2, 3, 5, 6 and 7."""
    report = result.report
    cover, agreement = report["coverage"], report["agreement"]
    lines = [
        "# Bias report",
        "",
        f"Images: {cover['images']}, with a final label: {cover['final_labels']}. "
        f"Cohen's kappa {num(agreement['cohen_kappa'])} on {agreement['n_images']} "
        "images with two labels.",
    ]
    if not cover["final_labels"]:
        # Empty tables alone read like a bug; say what is missing and how to get it.
        lines += [
            "",
            "No image has a final label yet, so there is nothing to compare: label the images "
            "(two annotators each) and settle the disputes, or load labels with import_ground_truth.",
        ]
    tables = [*analysis.tables(result).values(), gtables.prompt_scores_table(result.grid())]
    return render.export_tables(tables, "md", name="gender", heading=lines, left_out={}, paper=PAPER)
