"""The questions report's tables: pure functions of a ``QuestionsResult``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from reports import judges
from reports.tables import Table, ci_field, int_field, num_field, text_field

if TYPE_CHECKING:  # pragma: no cover - typing only
    from protocols.questions.report import QuestionsResult

PEOPLE = "people"
#: The columns that lead the shares and tests tables.
LEAD = (
    text_field("question", "Question"),
    text_field("t2i_model", "T2I model"),
    text_field("source", "Source"),
)


def sources(cell: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, figures) of one (question, T2I model) cell: the people's, then each judge's."""
    yield PEOPLE, cell
    yield from cell.get("judges", {}).items()


def _figures(result: QuestionsResult) -> Iterator[dict[str, Any]]:
    """The figures of every (question, T2I model, source) of the report, with those three."""
    for key, by_model in result.report["questions"].items():
        for model, cell in by_model.items():
            for source, figures in sources(cell):
                yield {**figures, "question": key, "t2i_model": model, "source": source}


def shares_table(result: QuestionsResult) -> Table:
    return Table.of(
        "question_shares",
        "Answer shares per group: people and judges",
        "Per question, T2I model and group, each answer's share with its 95 % Wilson interval: "
        "first the people's (final answers), then each judge's (the images it answered).",
        (
            *LEAD,
            text_field("group", "Group"),
            text_field("answer", "Answer"),
            int_field("n", "n"),
            num_field("share", "Share"),
            ci_field("ci95", "95 % CI", digits=3),
        ),
        (
            {**cell, "group": group, "answer": answer, "n": g["n"], "share": share, "ci95": g["ci95"][answer]}
            for cell in _figures(result)
            for group, g in cell["groups"].items()
            for answer, share in g["shares"].items()
        ),
    )


def tests_table(result: QuestionsResult) -> Table:
    return Table.of(
        "question_tests",
        "Differences between groups: people and judges",
        "Pearson's χ² test of answer x group (no continuity correction) with Cramér's V, and per "
        "answer the largest gap between two groups' shares (max_gap). max_gap_error: the judge's "
        "max_gap minus the people's (positive: the judge sees more difference than people).",
        (
            *LEAD,
            num_field("chi2", "χ²"),
            int_field("dof", "dof"),
            num_field("p_value", "p", digits=4),
            num_field("cramers_v", "Cramér's V"),
            text_field("answer", "Answer"),
            num_field("max_gap", "max_gap"),
            num_field("max_gap_error", "max_gap_error"),
        ),
        (
            {
                **cell,
                "answer": answer,
                "max_gap": gap,
                "max_gap_error": cell.get("max_gap_error", {}).get(answer),
            }
            for cell in _figures(result)
            for answer, gap in cell["max_gap"].items()
        ),
    )


def agreement_table(result: QuestionsResult) -> Table:
    return Table.of(
        "question_agreement",
        "Agreement between annotators",
        "Per question, over the images with two labels or more.",
        (
            text_field("question", "Question"),
            num_field("krippendorff_alpha", "Krippendorff \u03b1"),
            num_field("fleiss_kappa", "Fleiss κ"),
            num_field("observed_agreement", "Observed"),
            int_field("n_items", "Images"),
        ),
        ({**a, "question": key} for key, a in result.report["agreement"].items()),
    )


BUILDERS = {
    "question_shares": shares_table,
    "question_tests": tests_table,
    "question_agreement": agreement_table,
    **judges.table_builders(),
}
TABLE_KEYS = tuple(BUILDERS)
