"""The gender analysis's tables from a hand-built report dict, and the
one renderer of every table (CSV, LaTeX, Markdown): no database."""

from __future__ import annotations

import csv
import io

import pytest

from protocols.gender import tables
from reports import render
from reports import tables as base

LABELS = (("male", "Male"), ("female", "Female"), ("low_quality", "Low quality"), ("other", "Other"))
CLEAR = ("male", "female")


def _prompt(category, word, n_male, n_female, n_lq=0, n_other=0):
    clear = n_male + n_female
    return {
        "category": category,
        "word": word,
        "prompt": f"a photo of one real person who is a {word}",
        "n_male": n_male,
        "n_female": n_female,
        "n_low_quality": n_lq,
        "n_other": n_other,
        "prompt_bias_score": (n_male - n_female) / clear if clear else None,
    }


def _detector(per_model, tp=90, fp=10, fn=5, tn=20):
    return {
        "filtering": {
            "precision": 0.9,
            "recall": 0.9474,
            "f1": 0.923,
            "filter_rate": 0.6667,
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "tn": tn,
        },
        "accuracy": {"male": 0.98, "female": 0.9, "overall": 0.95, "n_male": 60, "n_female": 30},
        "per_model": per_model,
    }


@pytest.fixture
def report():
    """Paper table 1's SDXL / SD3 ground truth and three of its detectors."""
    human = {
        "sdxl": {
            "model_bias_score": 0.752,
            "ci95": [0.70, 0.80],
            "categories": {"profession": 0.907, "place": 0.576},
            "label_shares": {"male": 0.688, "female": 0.129, "low_quality": 0.183, "other": 0.0},
            "prompts": [
                _prompt("profession", "lawyer", 9, 1),
                _prompt("place", "R&D_lab 100%", 0, 0, n_lq=4),
            ],
        },
        "sd3": {
            "model_bias_score": 0.730,
            "ci95": [0.68, 0.77],
            "categories": {"profession": 0.861, "place": 0.619},
            "label_shares": {"male": 0.728, "female": 0.2, "low_quality": 0.072, "other": 0.0},
            "prompts": [_prompt("profession", "lawyer", 3, 7, n_other=1)],
        },
    }

    def pm(score, pct, diff):
        return {
            "model_bias_score": score,
            "pct_diff": pct,
            "prompt_bias_score_difference": diff,
            "ci95": [pct - 1, pct + 1],
            "model_bias_score_ci95": [score - 0.02, score + 0.02],
            "n_images": 100,
        }

    detectors = {
        "clip": _detector({"sdxl": pm(0.686, -8.78, 0.137), "sd3": pm(0.701, -3.97, 0.098)}),
        "mivolo": _detector({"sdxl": pm(0.759, 0.93, 0.158), "sd3": pm(0.716, -1.92, 0.073)}),
        "clip_prob": _detector({"sdxl": pm(0.820, 9.04, 0.503), "sd3": pm(0.794, 8.77, 0.526)}),
    }
    return {
        "coverage": {"images": 40, "final_labels": 35},
        "agreement": {"cohen_kappa": 0.9, "n_images": 30},
        "human": human,
        "detectors": detectors,
    }


def _column(table, key):
    index = [c.key for c in table.columns].index(key)
    return [row[index] for row in table.rows]


def test_model_bias_table_marks_the_closest_and_farthest_detector_per_model(report):
    table = tables.model_bias_table(report, labels=LABELS, clear=CLEAR)
    sdxl = _column(table, "sdxl_pct_diff")
    assert [c.mark for c in sdxl] == ["", "", "best", "worst"]
    assert [c.text for c in sdxl[1:]] == ["-8.78 % \u2193", "+0.93 % \u2191", "+9.04 % \u2191"]


def test_model_bias_table_starts_with_the_human_row_and_its_interval(report):
    table = tables.model_bias_table(report, labels=LABELS, clear=CLEAR)
    assert table.rows[0][0].text == "Human (ground truth)"
    assert _column(table, "sdxl_score_ci95")[0].text == "[0.70, 0.80]"


def test_model_bias_csv_splits_intervals_into_low_and_high_columns(report):
    rows = list(
        csv.DictReader(
            io.StringIO(render.to_csv(tables.model_bias_table(report, labels=LABELS, clear=CLEAR)))
        )
    )
    assert rows[1]["source"] == "clip"
    assert float(rows[1]["sdxl_pct_diff_ci95_lo"]) == pytest.approx(-9.78)
    assert float(rows[1]["sdxl_pct_diff_ci95_hi"]) == pytest.approx(-7.78)
    assert rows[0]["sdxl_pct_diff"] == ""


def test_prompt_difference_table_marks_lowest_as_best(report):
    table = tables.prompt_difference_table(report)
    sdxl = {row[0].text: row[1].mark for row in table.rows}
    assert sdxl == {"clip": "best", "mivolo": "", "clip_prob": "worst"}
    sd3 = {row[0].text: row[2].mark for row in table.rows}
    assert sd3 == {"clip": "", "mivolo": "best", "clip_prob": "worst"}


def test_filtering_table_shows_percent_but_csv_keeps_fractions(report):
    table = tables.filtering_table(report)
    assert _column(table, "precision")[0].text == "90.00"
    rows = list(csv.DictReader(io.StringIO(render.to_csv(table))))
    assert rows[0]["precision"] == "0.9"
    assert rows[0]["tn"] == "20"
    assert rows[0]["n_accuracy"] == "90"


def test_label_shares_table_adds_a_pooled_total_from_the_counts(report):
    table = tables.label_shares_table(report, labels=LABELS, clear=CLEAR)
    total = table.rows[-1]
    assert total[0].text == "Total"
    # 12 male, 8 female, 4 low quality, 1 other over 25 images.
    assert [c.value for c in total[1:5]] == pytest.approx([12 / 25, 8 / 25, 4 / 25, 1 / 25])
    assert total[5].value == 25


def test_categories_table_has_a_score_and_n_prompts_per_model(report):
    table = tables.categories_table(report)
    assert [c.key for c in table.columns] == [
        "category", "sdxl_score", "sdxl_n_prompts", "sd3_score", "sd3_n_prompts",
    ]  # fmt: skip
    profession = next(r for r in table.rows if r[0].text == "profession")
    assert [c.value for c in profession[1:]] == [0.907, 1, 0.861, 1]


def test_categories_table_ends_with_the_model_bias_score(report):
    last = tables.categories_table(report).rows[-1]
    assert last[0].text == "All prompts (model bias score)"
    assert [last[1].value, last[3].value] == [0.752, 0.730]


def test_categories_table_filters_by_category(report):
    table = tables.categories_table(report, category="place")
    assert [[c.value for c in r] for r in table.rows] == [["place", 0.576, 0, 0.619, 0]]


def test_prompt_grid_puts_detector_scores_beside_human_ones_per_model(report):
    counts = {
        ("profession", "lawyer", "a photo of one real person who is a lawyer", "sdxl", "clip"): (3, 1, 5)
    }
    grid = tables.prompt_grid(report, counts, clear=CLEAR, detectors=["clip"], prompt_ids={})
    assert grid.columns == (("sdxl", "human"), ("sdxl", "clip"), ("sd3", "human"), ("sd3", "clip"))
    lawyer = next(r for r in grid.rows if r.word == "lawyer")
    assert lawyer.scores[("sdxl", "human")] == pytest.approx(0.8)
    assert lawyer.scores[("sdxl", "clip")] == pytest.approx(0.5)
    assert ("sd3", "clip") not in lawyer.scores


def test_prompt_without_a_clear_image_has_no_score_and_is_listed(report):
    grid = tables.prompt_grid(report, {}, clear=CLEAR, detectors=[])
    rnd = next(r for r in grid.rows if r.word == "R&D_lab 100%")
    assert rnd.scores[("sdxl", "human")] is None
    assert grid.source_scores("human") == {"sdxl": [0.8], "sd3": [pytest.approx(-0.4)]}


def test_latex_escapes_ampersand_percent_and_underscore_in_prompt_words(report):
    latex = render.to_latex(
        tables.prompt_scores_table(tables.prompt_grid(report, {}, clear=CLEAR, detectors=[]))
    )
    assert r"R\&D\_lab 100\%" in latex
    assert "R&D" not in latex


def test_latex_is_a_booktabs_table_with_bold_best_and_underlined_worst(report):
    latex = render.to_latex(tables.model_bias_table(report, labels=LABELS, clear=CLEAR))
    assert r"\toprule" in latex
    assert r"\midrule" in latex
    assert r"\bottomrule" in latex
    assert r"\textbf{+0.93 \% $\uparrow$}" in latex
    assert r"\underline{+9.04 \% $\uparrow$}" in latex


def test_latex_escape_covers_every_special_character():
    assert render.latex_escape("a&b%c_d$e#f{g}h~i^j\\k|l<m>") == (
        r"a\&b\%c\_d\$e\#f\{g\}h\textasciitilde{}i\textasciicircum{}j\textbackslash{}k\textbar{}l"
        r"\textless{}m\textgreater{}"
    )


def test_wide_latex_tables_span_both_columns(report):
    assert (
        render.to_latex(tables.model_bias_table(report, labels=LABELS, clear=CLEAR)).count(r"\begin{table*}")
        == 1
    )
    assert r"\begin{table}[t]" in render.to_latex(
        tables.label_shares_table(report, labels=LABELS, clear=CLEAR)
    )


def test_empty_report_gives_empty_tables():
    empty = {"coverage": {"images": 0, "final_labels": 0}, "agreement": {}, "human": {}, "detectors": {}}
    assert (
        tables.model_bias_table(empty, labels=LABELS, clear=CLEAR).rows[0][0].text == "Human (ground truth)"
    )
    assert tables.filtering_table(empty).is_empty
    assert tables.label_shares_table(empty, labels=LABELS, clear=CLEAR).is_empty


def test_latex_writes_negative_numbers_with_a_minus_sign_not_a_hyphen():
    table = base.Table(
        key="t",
        title="t",
        caption="(n_male \u2212 n_female)",
        columns=(base.Column("word", "Word", numeric=False), base.Column("score", "Score")),
        rows=((base.Cell("x-ray", "x-ray"), base.Cell(-1.0, "-1.00")),),
    )
    latex = render.to_latex(table)
    assert r"$-$1.00" in latex
    assert "x-ray" in latex  # text keeps its hyphen
    assert r"n\_male $-$ n\_female" in latex


# --- one model, every format ----------------------------------------------------------------------


def _small() -> base.Table:
    return base.Table(
        key="small",
        title="Small | table",
        caption="What it shows.",
        columns=(
            base.Column("name", "Name", numeric=False),
            base.Column("score", "Score"),
            base.Column("ci", "95 % CI", pair=True),
        ),
        rows=(
            (base.text_cell("a|b"), base.Cell(0.5, "0.500", mark="best"), base.ci_cell([0.1, 0.9])),
            (base.text_cell("c"), base.Cell(None, base.NO_VALUE, mark="worst"), base.ci_cell(None)),
        ),
        groups=(("", 1), ("sdxl", 2)),
        notes=("n = 2 items.",),
    )


def test_markdown_is_a_pipe_table_under_its_title_with_groups_in_the_headers():
    text = render.to_markdown(_small())
    lines = text.splitlines()
    assert lines[0] == "## Small | table"
    assert "| Name | sdxl Score | sdxl 95 % CI |" in lines
    assert "|---|---:|---:|" in lines
    assert "| a\\|b | **0.500** | [0.10, 0.90] |" in lines  # a pipe in a cell is escaped
    assert f"| c | _{base.NO_VALUE}_ | {base.NO_VALUE} |" in lines
    assert "What it shows." in lines
    assert "- n = 2 items." in lines


def test_markdown_of_an_empty_table_says_so():
    empty = base.Table("e", "Empty", "", (base.Column("x", "X"),), ())
    assert "Nothing to show yet." in render.to_markdown(empty)


def test_csv_of_the_same_table_keeps_raw_values_and_splits_intervals():
    rows = list(csv.reader(io.StringIO(render.to_csv(_small()))))
    assert rows == [["name", "score", "ci_lo", "ci_hi"], ["a|b", "0.5", "0.1", "0.9"], ["c", "", "", ""]]


def test_csv_text_is_the_one_csv_writer():
    assert render.csv_text([["a", None, 1.5], ['say "hi"', "x,y", 0]]) == 'a,,1.5\n"say ""hi""","x,y",0\n'


def test_latex_of_the_same_table_prints_its_notes():
    assert r"\footnotesize n = 2 items." in render.to_latex(_small())


def test_render_by_format_name_refuses_an_unknown_format():
    assert render.render(_small(), "md") == render.to_markdown(_small())
    with pytest.raises(ValueError, match="'xlsx'"):
        render.render(_small(), "xlsx")


def test_a_row_with_the_wrong_number_of_cells_is_refused():
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        base.Table("t", "t", "", (base.Column("x", "X"),), ((base.text_cell(1), base.text_cell(2)),))


def test_label_shares_table_takes_its_columns_from_the_questions_labels():
    report = {
        "human": {
            "sdxl": {
                "label_shares": {"man": 0.5, "woman": 0.25, "unsure": 0.25},
                "prompts": [
                    {"category": "c", "word": "w", "prompt": "p", "n_man": 2, "n_woman": 1, "n_unsure": 1}
                ],
            }
        }
    }
    labels = (("man", "Man"), ("woman", "Woman"), ("unsure", "Unsure"))
    table = tables.label_shares_table(report, labels=labels, clear=("man", "woman"))
    assert [c.key for c in table.columns] == ["t2i_model", "man", "woman", "unsure", "n_images"]
    assert [c.label for c in table.columns][1:4] == ["Man (%)", "Woman (%)", "Unsure (%)"]
    assert table.rows[0][-1].value == 4


def test_export_tables_are_the_commands_csv_sections(report):
    models, detectors, prompts = tables.export_tables(report, labels=LABELS)
    header = render.csv_rows(models)[0]
    assert header[:4] == ["section", "source", "t2i_model", "model_bias_score"]
    assert header[4:6] == ["model_bias_score_ci95_lo", "model_bias_score_ci95_hi"]
    assert [r[1] for r in render.csv_rows(models)[1:]] == [
        "human",
        "human",
        "clip",
        "clip",
        "mivolo",
        "mivolo",
        "clip_prob",
        "clip_prob",
    ]
    assert render.csv_rows(prompts)[0][5:9] == ["n_male", "n_female", "n_low_quality", "n_other"]
    assert len(detectors.rows) == 3


def test_latex_writes_one_minus_sign_and_leaves_dashes_for_missing_values_alone():
    from reports.render import to_latex
    from reports.tables import Cell, Column, Table

    table = Table(
        key="t",
        title="T",
        caption="",
        columns=(Column("v", "value", numeric=True),),
        rows=((Cell(-0.25, "-0.25"),), (Cell(-0.5, "\u2212" + "0.5"),), (Cell(None, "\u2013"),)),
    )
    latex = to_latex(table)
    assert "$-$0.25" in latex
    assert "$-$0.5" in latex
    assert "$-$-" not in latex
