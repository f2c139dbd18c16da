"""The paper's tables built from a bias report, and their CSV and LaTeX renderings.

Everything here is pure: it reads the dict of ``reports.report.bias_report`` (the JSON contract
of issue 4) and plain rows from ``reports.drilldown``, and imports nothing from Django, so the
same ``Table`` renders as HTML on the dashboard and downloads as CSV or LaTeX without drifting.

A ``Cell`` keeps the raw value (what CSV writes, so spreadsheets get numbers) apart from its
display text (what HTML and LaTeX show, e.g. ``+1.46 % ↑``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LABELS = ("male", "female", "low_quality", "other")
LABEL_NAMES = {"male": "Male", "female": "Female", "low_quality": "Low quality", "other": "Other"}

# Table keys, in the order the overview shows them; downloads are addressed by these keys.
# Shown where there is no number (no clear image, detector gave no prediction): an en dash.
NO_VALUE = "\u2013"

TABLE_KEYS = ("model_bias", "prompt_difference", "filtering", "label_shares", "categories", "prompt_scores")


class UnknownTable(ValueError):
    """A download asked for a table name that does not exist."""


@dataclass(frozen=True)
class Cell:
    """One table cell: ``value`` goes to CSV, ``text`` to HTML and LaTeX.

    ``mark`` is "best" or "worst" (the paper's green and red cells), ``title`` a hover note
    such as the counts behind a score.
    """

    value: Any
    text: str
    mark: str = ""
    title: str = ""
    sort: float | None = None


@dataclass(frozen=True)
class Column:
    key: str  # CSV header
    label: str  # HTML / LaTeX header
    numeric: bool = True
    # A (low, high) interval: one cell on the page, two CSV columns <key>_lo and <key>_hi.
    pair: bool = False


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    caption: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    # Optional first header row of (label, span) groups, e.g. ("SDXL", 3).
    groups: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_empty(self) -> bool:
        return not self.rows

    @property
    def display_rows(self) -> list[list[tuple[Cell, Column]]]:
        """Rows as (cell, column) pairs, so templates can align text left and numbers right."""
        return [list(zip(row, self.columns, strict=True)) for row in self.rows]


# --- formatting ---------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return f"{value:.{digits}f}"


def _pct(fraction: float | None, digits: int = 2) -> str:
    """A ratio in [0, 1] shown as a percentage, the way the paper prints table 3 and 5."""
    if fraction is None:
        return NO_VALUE
    return f"{100 * fraction:.{digits}f}"


def _signed_pct(pct: float | None) -> str:
    """A signed percentage difference with the paper's arrow: ↑ over-, ↓ underestimate."""
    if pct is None:
        return NO_VALUE
    arrow = "↑" if pct > 0 else "↓" if pct < 0 else ""
    return f"{pct:+.2f} % {arrow}".strip()


def _ci(ci: Sequence[float | None] | None, digits: int = 2) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return NO_VALUE
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _text(value: Any) -> Cell:
    return Cell(value=value, text=str(value))


def _int(value: int | None) -> Cell:
    return Cell(value=value, text=NO_VALUE if value is None else f"{value:,}")


def _mark_extremes(cells: list[Cell | None], by: Iterable[float | None]) -> list[Cell | None]:
    """Mark the smallest |by| as best and the largest as worst (paper tables 1 and 2)."""
    scored = [(abs(v), i) for i, v in enumerate(by) if v is not None]
    if len(scored) < 2:
        return cells
    best = min(scored)[1]
    worst = max(scored)[1]
    if best == worst:
        return cells
    out = list(cells)
    for index, mark in ((best, "best"), (worst, "worst")):
        cell = out[index]
        if cell is not None:
            out[index] = Cell(cell.value, cell.text, mark, cell.title, cell.sort)
    return out


# --- report helpers -----------------------------------------------------------------------------


def model_keys(report: Mapping[str, Any]) -> list[str]:
    """T2I models in the report, in a stable order: as the human side lists them."""
    seen = list(report.get("human", {}))
    for det in report.get("detectors", {}).values():
        for model in det.get("per_model", {}):
            if model not in seen:
                seen.append(model)
    return seen


def detector_keys(report: Mapping[str, Any]) -> list[str]:
    return list(report.get("detectors", {}))


def prompt_counts(prompts: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Summed label counts over prompt rows: {"male", "female", "low_quality", "other", "clear", "images"}."""
    totals = dict.fromkeys(LABELS, 0)
    for row in prompts:
        for label in LABELS:
            totals[label] += int(row.get(f"n_{label}", 0) or 0)
    totals["clear"] = totals["male"] + totals["female"]
    totals["images"] = sum(totals[label] for label in LABELS)
    return totals


def detector_n(detector: Mapping[str, Any]) -> int:
    """Images a detector is scored on: those with a final human label and its prediction."""
    f = detector.get("filtering", {})
    return sum(int(f.get(k, 0) or 0) for k in ("tp", "fp", "fn", "tn"))


# --- the paper's tables -------------------------------------------------------------------------


def model_bias_table(report: Mapping[str, Any]) -> Table:
    """Paper table 1: model bias score of humans and every detector, signed % difference, CIs.

    Per T2I model: the score with its 95 % interval, the detector's signed difference from the
    human score in percent with the interval of that difference (the report's ``ci95`` of a
    detector), and n, the images behind the number.
    """
    models = model_keys(report)
    human = report.get("human", {})
    detectors = report.get("detectors", {})
    columns = [Column("source", "Source", numeric=False)]
    for model in models:
        columns += [
            Column(f"{model}_score", "Score"),
            Column(f"{model}_score_ci95", "95 % CI", pair=True),
            Column(f"{model}_pct_diff", "\u0394 vs human"),
            Column(f"{model}_pct_diff_ci95", "\u0394 95 % CI", pair=True),
            Column(f"{model}_n_images", "n"),
        ]

    human_row: list[Cell] = [_text("Human (ground truth)")]
    for model in models:
        h = human.get(model) or {}
        counts = prompt_counts(h.get("prompts", []))
        score = h.get("model_bias_score")
        n = h.get("n_images", counts["images"])
        human_row += [
            Cell(score, _num(score), title=f"{counts['clear']} clear of {counts['images']} images"),
            _ci_cell(h.get("ci95")),
            Cell(None, ""),
            Cell((None, None), ""),
            _int(n),
        ]

    det_rows: list[list[Cell]] = []
    for det_key, det in detectors.items():
        row: list[Cell] = [_text(det_key)]
        for model in models:
            pm = det.get("per_model", {}).get(model) or {}
            score = pm.get("model_bias_score")
            human_same = pm.get("human_model_bias_score")
            row += [
                Cell(
                    score,
                    _num(score),
                    title=f"human score on the same images: {_num(human_same)}"
                    if human_same is not None
                    else "",
                ),
                _ci_cell(pm.get("model_bias_score_ci95")),
                Cell(pm.get("pct_diff"), _signed_pct(pm.get("pct_diff"))),
                _ci_cell(pm.get("ci95"), digits=2),
                _int(pm.get("n_images")) if pm else Cell(None, NO_VALUE),
            ]
        det_rows.append(row)

    # Mark, per T2I model, the detector closest to and farthest from the human score.
    for m_index, model in enumerate(models):
        col = 1 + 5 * m_index + 2
        pct = [det.get("per_model", {}).get(model, {}).get("pct_diff") for det in detectors.values()]
        marked = _mark_extremes([r[col] for r in det_rows], pct)
        for r, cell in zip(det_rows, marked, strict=True):
            r[col] = cell  # type: ignore[assignment]

    return Table(
        key="model_bias",
        title="Model bias score: human vs detectors",
        caption=(
            "Model bias score (eq. 1) per T2I model. \u0394 is the detector's signed difference from "
            "the human score on the same images, in percent of the human score (\u2191 overestimate, "
            "\u2193 underestimate); bold/green the closest detector, underlined/red the farthest. 95 % "
            "bootstrap intervals resample images within prompts. n: images behind the number."
        ),
        columns=tuple(columns),
        rows=tuple(tuple(r) for r in [human_row, *det_rows]),
        groups=(("", 1), *((m, 5) for m in models)),
    )


def _ci_cell(ci: Sequence[float | None] | None, digits: int = 2) -> Cell:
    value = (ci[0], ci[1]) if ci and ci[0] is not None and ci[1] is not None else (None, None)
    return Cell(value, _ci(ci, digits))


def prompt_difference_table(report: Mapping[str, Any]) -> Table:
    """Paper table 2: mean absolute per-prompt bias score difference (eq. 3)."""
    models = model_keys(report)
    detectors = report.get("detectors", {})
    columns = [Column("detector", "Detector", numeric=False)]
    columns += [Column(model, model) for model in models]
    columns.append(Column("n_images", "n images"))
    rows: list[list[Cell]] = []
    for det_key, det in detectors.items():
        row = [_text(det_key)]
        for model in models:
            value = det.get("per_model", {}).get(model, {}).get("prompt_bias_score_difference")
            row.append(Cell(value, _num(value)))
        row.append(_int(detector_n(det)))
        rows.append(row)
    for m_index, model in enumerate(models):
        col = 1 + m_index
        diffs = [
            det.get("per_model", {}).get(model, {}).get("prompt_bias_score_difference")
            for det in detectors.values()
        ]
        marked = _mark_extremes([r[col] for r in rows], diffs)
        for r, cell in zip(rows, marked, strict=True):
            r[col] = cell  # type: ignore[assignment]
    return Table(
        key="prompt_difference",
        title="Prompt bias score difference",
        caption=(
            "Mean absolute difference between the detector's and the human prompt bias score over "
            "the prompts both score (eq. 3); lower is better. Green lowest, red highest."
        ),
        columns=tuple(columns),
        rows=tuple(tuple(r) for r in rows),
    )


def filtering_table(report: Mapping[str, Any]) -> Table:
    """Paper table 3: filtering (clear image = positive class) and classification accuracy."""
    columns = (
        Column("detector", "Detector", numeric=False),
        Column("precision", "Precision (%)"),
        Column("recall", "Recall (%)"),
        Column("f1", "F1 (%)"),
        Column("filter_rate", "Filter rate (%)"),
        Column("accuracy_male", "Male acc. (%)"),
        Column("accuracy_female", "Female acc. (%)"),
        Column("accuracy_overall", "Overall acc. (%)"),
        Column("n_accuracy", "n acc."),
        Column("tp", "TP"),
        Column("fp", "FP"),
        Column("fn", "FN"),
        Column("tn", "TN"),
    )
    rows = []
    for det_key, det in report.get("detectors", {}).items():
        f = det.get("filtering", {})
        a = det.get("accuracy", {})
        rows.append(
            (
                _text(det_key),
                Cell(f.get("precision"), _pct(f.get("precision"))),
                Cell(f.get("recall"), _pct(f.get("recall"))),
                Cell(f.get("f1"), _pct(f.get("f1"))),
                Cell(f.get("filter_rate"), _pct(f.get("filter_rate"))),
                Cell(a.get("male"), _pct(a.get("male"))),
                Cell(a.get("female"), _pct(a.get("female"))),
                Cell(a.get("overall"), _pct(a.get("overall"))),
                _int(_accuracy_n(a)),
                _int(f.get("tp")),
                _int(f.get("fp")),
                _int(f.get("fn")),
                _int(f.get("tn")),
            )
        )
    return Table(
        key="filtering",
        title="Filtering and classification accuracy",
        caption=(
            "Filtering: positive class is a clear image (human final label male or female); the "
            "detector keeps an image when it answers male or female. Filter rate is the share of "
            "low-quality images it filters. Accuracy on images clear to humans and kept by the "
            "detector (n acc.). CSV values are fractions; the page shows percentages."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def _accuracy_n(accuracy: Mapping[str, Any]) -> int | None:
    """Images behind the overall accuracy: clear to humans and kept (male + female)."""
    if "n_male" not in accuracy:
        return None
    return int(accuracy.get("n_male") or 0) + int(accuracy.get("n_female") or 0)


def label_shares_table(report: Mapping[str, Any]) -> Table:
    """Paper table 5: share of male / female / low-quality / other final labels per T2I model."""
    columns = (
        Column("t2i_model", "T2I model", numeric=False),
        *(Column(label, f"{LABEL_NAMES[label]} (%)") for label in LABELS),
        Column("n_images", "n images"),
    )
    rows = []
    all_prompts: list[Mapping[str, Any]] = []
    for model, h in report.get("human", {}).items():
        shares = h.get("label_shares", {})
        counts = prompt_counts(h.get("prompts", []))
        all_prompts += h.get("prompts", [])
        rows.append(
            (
                _text(model),
                *(
                    Cell(shares.get(label), _pct(shares.get(label)), title=f"{counts[label]} images")
                    for label in LABELS
                ),
                _int(counts["images"]),
            )
        )
    if len(rows) > 1:
        # Pooled over models from the counts (the paper's "Total" row).
        totals = prompt_counts(all_prompts)
        n = totals["images"]
        rows.append(
            (
                _text("Total"),
                *(
                    Cell(
                        totals[label] / n if n else None,
                        _pct(totals[label] / n if n else None),
                        title=f"{totals[label]} images",
                    )
                    for label in LABELS
                ),
                _int(n),
            )
        )
    return Table(
        key="label_shares",
        title="Final labels per T2I model",
        caption="Share of images per final human label; counts on hover and in n images.",
        columns=columns,
        rows=tuple(rows),
    )


def categories_table(report: Mapping[str, Any], *, category: str | None = None) -> Table:
    """Paper table 6, one column pair per T2I model: category bias score and the number of
    prompts it averages; the last row is the model bias score over all prompts."""
    human = report.get("human", {})
    models = list(human)
    categories: list[str] = []
    scored: dict[tuple[str, str], int] = {}
    for model, h in human.items():
        for cat in h.get("categories", {}):
            if cat not in categories and (not category or cat == category):
                categories.append(cat)
        for p in h.get("prompts", []):
            if p.get("prompt_bias_score") is not None:
                scored[(model, p["category"])] = scored.get((model, p["category"]), 0) + 1
    columns = [Column("category", "Category", numeric=False)]
    for model in models:
        columns += [Column(f"{model}_score", "Bias score"), Column(f"{model}_n_prompts", "n prompts")]
    rows = []
    for cat in sorted(categories):
        row = [_text(cat)]
        for model in models:
            score = human[model].get("categories", {}).get(cat)
            row += [Cell(score, _num(score)), _int(scored.get((model, cat), 0))]
        rows.append(tuple(row))
    if rows and not category:
        total = [_text("All prompts (model bias score)")]
        for model in models:
            h = human[model]
            n = h.get("n_prompts_scored", sum(v for (m, _c), v in scored.items() if m == model))
            total += [Cell(h.get("model_bias_score"), _num(h.get("model_bias_score"))), _int(n)]
        rows.append(tuple(total))
    return Table(
        key="categories",
        title="Bias score per prompt category",
        caption=(
            "Category bias score: mean over the category's prompts of |n_male \u2212 n_female| / "
            "n_clear (eq. 1 within the category); last row: the model bias score over all prompts. "
            "Prompts without a clear image have no score and are not averaged (n counts scored "
            "prompts)."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=(("", 1), *((m, 2) for m in models)),
    )


# --- prompt scores (table 7 / heatmap) ----------------------------------------------------------


@dataclass(frozen=True)
class PromptRow:
    """One prompt of the heatmap: the human counts per model and every source's score."""

    prompt_id: int | None
    category: str
    word: str
    prompt: str
    scores: dict[tuple[str, str], float | None]  # (t2i_model, source) -> score
    counts: dict[tuple[str, str], tuple[int, int, int]]  # (t2i_model, source) -> (male, female, n)


@dataclass(frozen=True)
class PromptGrid:
    """Prompts x (T2I model, source) prompt bias scores: the data of paper table 7 / figure 3."""

    rows: tuple[PromptRow, ...]
    columns: tuple[tuple[str, str], ...]  # (t2i_model, source); source "human" or a detector key

    def values(self) -> list[list[float | None]]:
        return [[row.scores.get(col) for col in self.columns] for row in self.rows]

    def source_scores(self, source: str) -> dict[str, list[float]]:
        """Scores of one source per T2I model, prompts without a score left out (figure 3)."""
        out: dict[str, list[float]] = {}
        for model, src in self.columns:
            if src != source:
                continue
            out[model] = [s for row in self.rows if (s := row.scores.get((model, src))) is not None]
        return out


HUMAN = "human"


def prompt_grid(
    report: Mapping[str, Any],
    detector_counts: Mapping[tuple[str, str, str, str, str], tuple[int, int, int]],
    *,
    prompt_ids: Mapping[tuple[str, str, str], int] | None = None,
    detectors: Sequence[str] = (),
    category: str | None = None,
) -> PromptGrid:
    """Build the grid from the report's human prompts and detectors' per-prompt counts.

    ``detector_counts`` maps (category, word, prompt, t2i_model, detector) to (n_male,
    n_female, n_predicted) of the detector on images with a final human label. Rows follow category, then
    the mean human score (most male first), as the paper sorts table 7.
    """
    models = list(report.get("human", {}))
    columns = [(m, source) for m in models for source in (HUMAN, *detectors)]
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    for model in models:
        for p in report["human"][model].get("prompts", []):
            if category and p["category"] != category:
                continue
            key = (p["category"], p["word"], p["prompt"])
            entry = by_key.setdefault(key, {"scores": {}, "counts": {}})
            entry["scores"][(model, HUMAN)] = p.get("prompt_bias_score")
            entry["counts"][(model, HUMAN)] = (
                int(p.get("n_male", 0)),
                int(p.get("n_female", 0)),
                sum(int(p.get(f"n_{label}", 0) or 0) for label in LABELS),
            )
    for (cat, word, text, model, det), (n_m, n_f, n_all) in detector_counts.items():
        entry = by_key.get((cat, word, text))
        if entry is None or det not in detectors or model not in models:
            continue
        entry["scores"][(model, det)] = (n_m - n_f) / (n_m + n_f) if n_m + n_f else None
        entry["counts"][(model, det)] = (n_m, n_f, n_all)
    rows = [
        PromptRow(
            prompt_id=(prompt_ids or {}).get(key),
            category=key[0],
            word=key[1],
            prompt=key[2],
            scores=entry["scores"],
            counts=entry["counts"],
        )
        for key, entry in by_key.items()
    ]

    def order(row: PromptRow) -> tuple[str, float, str]:
        human = [s for (m, src), s in row.scores.items() if src == HUMAN and s is not None]
        mean = sum(human) / len(human) if human else -2.0  # unscored prompts go last
        return (row.category, -mean, row.word)

    rows.sort(key=order)
    return PromptGrid(rows=tuple(rows), columns=tuple(columns))


def prompt_scores_table(grid: PromptGrid) -> Table:
    """Paper table 7 as a table: one row per prompt, one column per (T2I model, source)."""
    # The prompt text too: several templates may share a word, and rows must stay joinable.
    columns = [
        Column("category", "Category", numeric=False),
        Column("word", "Word", numeric=False),
        Column("prompt", "Prompt", numeric=False),
    ]
    columns += [
        Column(f"{model}_{source}", source if source != HUMAN else "Human") for model, source in grid.columns
    ]
    rows = []
    for row in grid.rows:
        cells = [_text(row.category), _text(row.word), _text(row.prompt)]
        for col in grid.columns:
            score = row.scores.get(col)
            n_m, n_f, n_all = row.counts.get(col, (0, 0, 0))
            cells.append(Cell(score, _num(score, 2), title=f"{n_m} male, {n_f} female of {n_all}"))
        rows.append(tuple(cells))
    groups: list[tuple[str, int]] = [("", 3)]
    for model, _source in grid.columns:
        if groups[-1][0] == model:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            groups.append((model, 1))
    return Table(
        key="prompt_scores",
        title="Prompt bias score per prompt",
        caption=(
            "(n_male \u2212 n_female) / n_clear per prompt (eq. 2): 1 all male, \u22121 all female; "
            "\u2013 means no clear image, so no score."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=tuple(groups),
    )


# --- confusion (detector drill-down) ------------------------------------------------------------


def confusion_table(
    detector: str,
    confusion: Mapping[tuple[str, str], int],
    *,
    human_labels: Sequence[str],
    verdicts: Sequence[str],
) -> Table:
    """Human final label x detector verdict counts, with row totals."""
    columns = (
        Column("human_label", "Human label ↓ / detector →", numeric=False),
        *(Column(v, v) for v in verdicts),
        Column("total", "Total"),
    )
    rows = []
    for label in human_labels:
        counts = [confusion.get((label, v), 0) for v in verdicts]
        rows.append((_text(LABEL_NAMES.get(label, label)), *(_int(c) for c in counts), _int(sum(counts))))
    return Table(
        key="confusion",
        title=f"{detector}: confusion with the human labels",
        caption="Images with a final human label and this detector's prediction.",
        columns=columns,
        rows=tuple(rows),
    )


# --- CSV and LaTeX -------------------------------------------------------------------------------


def to_csv(table: Table) -> str:
    """Raw values with machine column names: fractions stay fractions, blanks stay blank."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header: list[str] = []
    for column in table.columns:
        header += [f"{column.key}_lo", f"{column.key}_hi"] if column.pair else [column.key]
    writer.writerow(header)
    for row in table.rows:
        values: list[Any] = []
        for column, cell in zip(table.columns, row, strict=True):
            values += list(cell.value) if column.pair else [cell.value]
        writer.writerow(["" if v is None else v for v in values])
    return buffer.getvalue()


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "→": r"$\rightarrow$",
    "\u2212": r"$-$",
    "\u2013": "--",
    "Δ": r"$\Delta$",
}


def latex_escape(text: str) -> str:
    """Escape every LaTeX special character (prompt words may hold &, % or _)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(table: Table) -> str:
    """A booktabs table: \\toprule/\\midrule/\\bottomrule, best in bold, worst underlined."""
    align = "".join("r" if c.numeric else "l" for c in table.columns)
    # Wide tables (table 1 with its intervals, table 7) span both columns of a two-column paper.
    env = "table*" if len(table.columns) > 9 else "table"
    lines = [
        r"% Needs \usepackage{booktabs}",
        rf"\begin{{{env}}}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(table.caption)}}}",
        rf"\label{{tab:{table.key.replace('_', '-')}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
    ]
    if table.groups and any(label for label, _ in table.groups):
        parts, rules, start = [], [], 1
        for label, span in table.groups:
            parts.append(
                rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(label)}}}" if span > 1 else latex_escape(label)
            )
            if label:
                rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines.append(" & ".join(parts) + r" \\")
        lines.append(" ".join(rules))
    lines.append(" & ".join(latex_escape(c.label) for c in table.columns) + r" \\")
    lines.append(r"\midrule")
    for row in table.rows:
        cells = []
        for column, cell in zip(table.columns, row, strict=True):
            text = latex_escape(cell.text)
            if column.numeric and text.startswith("-"):
                text = "$-$" + text[1:]  # a minus sign, not a hyphen
            if cell.mark == "best":
                text = rf"\textbf{{{text}}}"
            elif cell.mark == "worst":
                text = rf"\underline{{{text}}}"
            cells.append(text)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\end{{{env}}}", ""]
    return "\n".join(lines)
