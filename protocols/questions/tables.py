"""The questions report's tables: pure functions of a ``QuestionsResult``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from reports import judges
from reports.tables import Column, Table, ci_cell, int_cell, num_cell, text_cell

if TYPE_CHECKING:  # pragma: no cover - typing only
    from protocols.questions.report import QuestionsResult

PEOPLE = "people"
TABLE_KEYS = ("question_shares", "question_tests", "question_agreement", "judges", "judge_versions")


def sources(cell: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, figures) of one (question, T2I model) cell: the people's, then each judge's."""
    yield PEOPLE, cell
    yield from cell.get("judges", {}).items()


def shares_table(result: QuestionsResult) -> Table:
    rows = []
    for key, by_model in result.report["questions"].items():
        for model, cell in by_model.items():
            for source, figures in sources(cell):
                for group, g in figures["groups"].items():
                    for answer, share in g["shares"].items():
                        rows.append(
                            (
                                text_cell(key),
                                text_cell(model),
                                text_cell(source),
                                text_cell(group),
                                text_cell(answer),
                                int_cell(g["n"]),
                                num_cell(share),
                                ci_cell(g["ci95"][answer], 3),
                            )
                        )
    return Table(
        key="question_shares",
        title="Answer shares per group: people and judges",
        caption=(
            "Per question, T2I model and group, each answer's share with its 95 % Wilson interval: "
            "first the people's (final answers), then each judge's (the images it answered)."
        ),
        columns=(
            Column("question", "Question", numeric=False),
            Column("t2i_model", "T2I model", numeric=False),
            Column("source", "Source", numeric=False),
            Column("group", "Group", numeric=False),
            Column("answer", "Answer", numeric=False),
            Column("n", "n"),
            Column("share", "Share"),
            Column("ci95", "95 % CI", pair=True),
        ),
        rows=tuple(rows),
    )


def tests_table(result: QuestionsResult) -> Table:
    rows = []
    for key, by_model in result.report["questions"].items():
        for model, cell in by_model.items():
            for source, figures in sources(cell):
                errors = figures.get("max_gap_error", {})
                for answer, gap in figures["max_gap"].items():
                    rows.append(
                        (
                            text_cell(key),
                            text_cell(model),
                            text_cell(source),
                            num_cell(figures["chi2"]),
                            int_cell(figures["dof"]),
                            num_cell(figures["p_value"], 4),
                            num_cell(figures["cramers_v"]),
                            text_cell(answer),
                            num_cell(gap),
                            num_cell(errors.get(answer)),
                        )
                    )
    return Table(
        key="question_tests",
        title="Differences between groups: people and judges",
        caption=(
            "Pearson's χ² test of answer x group (no continuity correction) with Cramér's V, and per "
            "answer the largest gap between two groups' shares (max_gap). max_gap_error: the judge's "
            "max_gap minus the people's (positive: the judge sees more difference than people)."
        ),
        columns=(
            Column("question", "Question", numeric=False),
            Column("t2i_model", "T2I model", numeric=False),
            Column("source", "Source", numeric=False),
            Column("chi2", "χ²"),
            Column("dof", "dof"),
            Column("p_value", "p"),
            Column("cramers_v", "Cramér's V"),
            Column("answer", "Answer", numeric=False),
            Column("max_gap", "max_gap"),
            Column("max_gap_error", "max_gap_error"),
        ),
        rows=tuple(rows),
    )


def agreement_table(result: QuestionsResult) -> Table:
    rows = tuple(
        (
            text_cell(key),
            *(num_cell(a[k]) for k in ("krippendorff_alpha", "fleiss_kappa", "observed_agreement")),
            int_cell(a["n_items"]),
        )
        for key, a in result.report["agreement"].items()
    )
    return Table(
        key="question_agreement",
        title="Agreement between annotators",
        caption="Per question, over the images with two labels or more.",
        columns=(
            Column("question", "Question", numeric=False),
            Column("krippendorff_alpha", "Krippendorff \u03b1"),
            Column("fleiss_kappa", "Fleiss κ"),
            Column("observed_agreement", "Observed"),
            Column("n_items", "Images"),
        ),
        rows=rows,
    )


def judges_table(result: QuestionsResult) -> Table:
    return judges.judges_table(result.report["judges"])


def judge_versions_table(result: QuestionsResult) -> Table:
    return judges.judge_versions_table(result.report["judge_versions"], result.report["judges"])


BUILDERS = {
    "question_shares": shares_table,
    "question_tests": tests_table,
    "question_agreement": agreement_table,
    "judges": judges_table,
    "judge_versions": judge_versions_table,
}
