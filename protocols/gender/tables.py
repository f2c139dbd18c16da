"""The paper's tables (Lyu et al. 2025) built from a gender report: pure functions of the
report dict and plain rows; ``labels`` are the (value, name) pairs of the gender question."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports.tables import (
    NO_VALUE,
    Cell,
    Column,
    Table,
    ci_cell,
    int_cell,
    mark_extremes,
    num,
    num_cell,
    pct,
    signed_pct,
    text_cell,
)

Labels = Sequence[tuple[str, str]]  # (value, display name), in the question's order

# The overview's tables, in page order; downloads are addressed by these keys.
OVERVIEW_KEYS = ("model_bias", "prompt_difference", "filtering", "label_shares", "categories")
TABLE_KEYS = (*OVERVIEW_KEYS, "prompt_scores", "confusion", "judges", "judge_versions")
HUMAN = "human"


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


def prompt_counts(
    prompts: Iterable[Mapping[str, Any]], labels: Labels, clear: Sequence[str]
) -> dict[str, int]:
    """Summed label counts over prompt rows: {value: n for each label, "clear", "images"}."""
    values = [value for value, _ in labels]
    totals = dict.fromkeys(values, 0)
    for row in prompts:
        for value in values:
            totals[value] += int(row.get(f"n_{value}", 0) or 0)
    out = dict(totals)
    out["clear"] = sum(totals.get(value, 0) for value in clear)
    out["images"] = sum(totals.values())
    return out


def detector_n(detector: Mapping[str, Any]) -> int:
    """Images a detector is scored on: those with a final human label and its prediction."""
    f = detector.get("filtering", {})
    return sum(int(f.get(k, 0) or 0) for k in ("tp", "fp", "fn", "tn"))


def _mark_column(
    rows: list[list[Cell]], col: int, detectors: Mapping[str, Any], model: str, figure: str
) -> None:
    """Mark in column ``col`` the detectors whose |``figure``| on ``model`` is smallest and largest."""
    diffs = [det.get("per_model", {}).get(model, {}).get(figure) for det in detectors.values()]
    for r, cell in zip(rows, mark_extremes([r[col] for r in rows], diffs), strict=True):
        r[col] = cell


def model_bias_table(report: Mapping[str, Any], *, labels: Labels, clear: Sequence[str]) -> Table:
    """Paper table 1: model bias score of humans and every detector, the signed % difference,
    their 95 % intervals and n."""
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

    human_row: list[Cell] = [text_cell("Human (ground truth)")]
    for model in models:
        h = human.get(model) or {}
        counts = prompt_counts(h.get("prompts", []), labels, clear)
        score = h.get("model_bias_score")
        n = h.get("n_images", counts["images"])
        human_row += [
            num_cell(score, title=f"{counts['clear']} clear of {counts['images']} images"),
            ci_cell(h.get("ci95")),
            Cell(None, ""),
            Cell((None, None), ""),
            int_cell(n),
        ]

    det_rows: list[list[Cell]] = []
    for det_key, det in detectors.items():
        row: list[Cell] = [text_cell(det_key)]
        for model in models:
            pm = det.get("per_model", {}).get(model) or {}
            score = pm.get("model_bias_score")
            human_same = pm.get("human_model_bias_score")
            row += [
                Cell(
                    score,
                    num(score),
                    title=f"human score on the same images: {num(human_same)}"
                    if human_same is not None
                    else "",
                ),
                ci_cell(pm.get("model_bias_score_ci95")),
                Cell(pm.get("pct_diff"), signed_pct(pm.get("pct_diff"))),
                ci_cell(pm.get("ci95"), digits=2),
                int_cell(pm.get("n_images")) if pm else Cell(None, NO_VALUE),
            ]
        det_rows.append(row)

    # Mark, per T2I model, the detector closest to and farthest from the human score.
    for m_index, model in enumerate(models):
        _mark_column(det_rows, 1 + 5 * m_index + 2, detectors, model, "pct_diff")

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


def prompt_difference_table(report: Mapping[str, Any]) -> Table:
    """Paper table 2: mean absolute per-prompt bias score difference (eq. 3)."""
    models = model_keys(report)
    detectors = report.get("detectors", {})
    columns = [Column("detector", "Detector", numeric=False)]
    columns += [Column(model, model) for model in models]
    columns.append(Column("n_images", "n images"))
    rows: list[list[Cell]] = []
    for det_key, det in detectors.items():
        row = [text_cell(det_key)]
        for model in models:
            value = det.get("per_model", {}).get(model, {}).get("prompt_bias_score_difference")
            row.append(num_cell(value))
        row.append(int_cell(detector_n(det)))
        rows.append(row)
    for m_index, model in enumerate(models):
        _mark_column(rows, 1 + m_index, detectors, model, "prompt_bias_score_difference")
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
    filtering = {"precision": "Precision", "recall": "Recall", "f1": "F1", "filter_rate": "Filter rate"}
    accuracy = {"male": "Male acc.", "female": "Female acc.", "overall": "Overall acc."}
    counts = ("tp", "fp", "fn", "tn")
    columns = (
        Column("detector", "Detector", numeric=False),
        Column("version", "Version", numeric=False),
        *(Column(key, f"{label} (%)") for key, label in filtering.items()),
        *(Column(f"accuracy_{key}", f"{label} (%)") for key, label in accuracy.items()),
        Column("n_accuracy", "n acc."),
        *(Column(key, key.upper()) for key in counts),
    )
    rows = []
    for det_key, det in report.get("detectors", {}).items():
        f = det.get("filtering", {})
        a = det.get("accuracy", {})
        rows.append(
            (
                text_cell(det_key),
                text_cell(det.get("version", "")),
                *(Cell(f.get(key), pct(f.get(key))) for key in filtering),
                *(Cell(a.get(key), pct(a.get(key))) for key in accuracy),
                int_cell(_accuracy_n(a)),
                *(int_cell(f.get(key)) for key in counts),
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


def label_shares_table(report: Mapping[str, Any], *, labels: Labels, clear: Sequence[str]) -> Table:
    """Paper table 5: share of each final label (the question's choices) per T2I model."""
    columns = (
        Column("t2i_model", "T2I model", numeric=False),
        *(Column(value, f"{name} (%)") for value, name in labels),
        Column("n_images", "n images"),
    )
    rows = []
    all_prompts: list[Mapping[str, Any]] = []
    for model, h in report.get("human", {}).items():
        shares = h.get("label_shares", {})
        counts = prompt_counts(h.get("prompts", []), labels, clear)
        all_prompts += h.get("prompts", [])
        rows.append(
            (
                text_cell(model),
                *(
                    Cell(shares.get(value), pct(shares.get(value)), title=f"{counts[value]} images")
                    for value, _ in labels
                ),
                int_cell(counts["images"]),
            )
        )
    if len(rows) > 1:
        # Pooled over models from the counts (the paper's "Total" row).
        totals = prompt_counts(all_prompts, labels, clear)
        n = totals["images"]
        rows.append(
            (
                text_cell("Total"),
                *(
                    Cell(
                        totals[value] / n if n else None,
                        pct(totals[value] / n if n else None),
                        title=f"{totals[value]} images",
                    )
                    for value, _ in labels
                ),
                int_cell(n),
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
        row = [text_cell(cat)]
        for model in models:
            score = human[model].get("categories", {}).get(cat)
            row += [num_cell(score), int_cell(scored.get((model, cat), 0))]
        rows.append(tuple(row))
    if rows and not category:
        total = [text_cell("All prompts (model bias score)")]
        for model in models:
            h = human[model]
            n = h.get("n_prompts_scored", sum(v for (m, _c), v in scored.items() if m == model))
            total += [num_cell(h.get("model_bias_score")), int_cell(n)]
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

    def model_blocks(self) -> list[tuple[str, int, int]]:
        """(T2I model, first column, last column) for each run of columns of one model."""
        blocks: list[tuple[str, int, int]] = []
        for c, (model, _source) in enumerate(self.columns):
            if blocks and blocks[-1][0] == model:
                blocks[-1] = (model, blocks[-1][1], c)
            else:
                blocks.append((model, c, c))
        return blocks

    def source_scores(self, source: str) -> dict[str, list[float]]:
        """Scores of one source per T2I model, prompts without a score left out (figure 3)."""
        out: dict[str, list[float]] = {}
        for model, src in self.columns:
            if src != source:
                continue
            out[model] = [s for row in self.rows if (s := row.scores.get((model, src))) is not None]
        return out


def prompt_grid(
    report: Mapping[str, Any],
    detector_counts: Mapping[tuple[str, str, str, str, str], tuple[int, int, int]],
    *,
    clear: Sequence[str],
    prompt_ids: Mapping[tuple[str, str, str], int] | None = None,
    detectors: Sequence[str] = (),
    category: str | None = None,
) -> PromptGrid:
    """The grid from the report's human prompts and the detectors' per-prompt counts, sorted as
    the paper sorts table 7 (category, then most male first)."""
    first, second = clear
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
                int(p.get(f"n_{first}", 0)),
                int(p.get(f"n_{second}", 0)),
                sum(int(v or 0) for k, v in p.items() if k.startswith("n_")),
            )
    for (cat, word, text, model, det), (n_m, n_f, n_all) in detector_counts.items():
        scored = by_key.get((cat, word, text))
        if scored is None or det not in detectors or model not in models:
            continue
        scored["scores"][(model, det)] = (n_m - n_f) / (n_m + n_f) if n_m + n_f else None
        scored["counts"][(model, det)] = (n_m, n_f, n_all)
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
        cells = [text_cell(row.category), text_cell(row.word), text_cell(row.prompt)]
        for col in grid.columns:
            score = row.scores.get(col)
            n_m, n_f, n_all = row.counts.get(col, (0, 0, 0))
            cells.append(num_cell(score, 2, title=f"{n_m} male, {n_f} female of {n_all}"))
        rows.append(tuple(cells))
    groups = [("", 3), *((model, last - first + 1) for model, first, last in grid.model_blocks())]
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


def confusion_table(
    detector: str,
    confusion: Mapping[tuple[str, str], int],
    *,
    labels: Labels,
    verdicts: Sequence[str],
) -> Table:
    """Human final label x detector verdict counts, with row totals; one row per label."""
    columns = (
        Column("human_label", "Human label ↓ / detector →", numeric=False),
        *(Column(v, v) for v in verdicts),
        Column("total", "Total"),
    )
    rows = []
    for value, name in labels:
        counts = [confusion.get((value, v), 0) for v in verdicts]
        rows.append((text_cell(name), *(int_cell(c) for c in counts), int_cell(sum(counts))))
    return Table(
        key="confusion",
        title=f"{detector}: confusion with the human labels",
        caption="Images with a final human label and this detector's prediction.",
        columns=columns,
        rows=tuple(rows),
    )


def _ci_pair(interval: Sequence[float] | None) -> tuple[float | None, float | None]:
    return (interval[0], interval[1]) if interval else (None, None)


def _raw(*values: Any) -> tuple[Cell, ...]:
    """Cells for a CSV-only table: the value, shown as itself."""
    return tuple(Cell(v, NO_VALUE if v is None else str(v)) for v in values)


def export_tables(report: Mapping[str, Any], *, labels: Labels) -> tuple[Table, Table, Table]:
    """The three sections of ``bias_report --format csv`` (``models``, ``detectors``,
    ``prompts``), each a Table whose first column is ``section``."""
    section = Column("section", "Section", numeric=False)
    models_columns = (
        section,
        Column("source", "Source", numeric=False),
        Column("t2i_model", "T2I model", numeric=False),
        Column("model_bias_score", "Score"),
        Column("model_bias_score_ci95", "95 % CI", pair=True),
        Column("pct_diff", "\u0394 vs human (%)"),
        Column("pct_diff_ci95", "\u0394 95 % CI", pair=True),
        Column("prompt_bias_score_difference", "Prompt score difference"),
        Column("n_images", "n images"),
    )
    model_rows = []
    for model, human in report["human"].items():
        model_rows.append(
            (
                *_raw("models", "human", model, human["model_bias_score"]),
                Cell(_ci_pair(human["ci95"]), ""),
                *_raw(None),
                Cell((None, None), ""),
                *_raw(None, human.get("n_images")),
            )
        )
    for key, detector in report["detectors"].items():
        for model, part in detector["per_model"].items():
            model_rows.append(
                (
                    *_raw("models", key, model, part["model_bias_score"]),
                    Cell(_ci_pair(part.get("model_bias_score_ci95")), ""),
                    *_raw(part["pct_diff"]),
                    Cell(_ci_pair(part["ci95"]), ""),
                    *_raw(part["prompt_bias_score_difference"], part.get("n_images")),
                )
            )
    filtering_keys = ("precision", "recall", "f1", "filter_rate", "tp", "fp", "fn", "tn")
    detector_columns = (
        section,
        Column("detector", "Detector", numeric=False),
        Column("version", "Version", numeric=False),
        *(Column(k, k) for k in filtering_keys),
        Column("accuracy_male", "Male acc."),
        Column("accuracy_female", "Female acc."),
        Column("accuracy_overall", "Overall acc."),
    )
    detector_rows = [
        _raw(
            "detectors",
            key,
            d.get("version"),
            *(d["filtering"][k] for k in filtering_keys),
            d["accuracy"]["male"],
            d["accuracy"]["female"],
            d["accuracy"]["overall"],
        )
        for key, d in report["detectors"].items()
    ]
    count_keys = [f"n_{value}" for value, _ in labels]
    prompt_columns = (
        section,
        Column("t2i_model", "T2I model", numeric=False),
        Column("category", "Category", numeric=False),
        Column("word", "Word", numeric=False),
        Column("prompt", "Prompt", numeric=False),
        *(Column(k, k) for k in count_keys),
        Column("prompt_bias_score", "Score"),
    )
    prompt_rows = [
        _raw(
            "prompts",
            model,
            p["category"],
            p["word"],
            p["prompt"],
            *(p.get(k, 0) for k in count_keys),
            p["prompt_bias_score"],
        )
        for model, human in report["human"].items()
        for p in human["prompts"]
    ]
    return (
        Table("models", "Model bias scores", "", models_columns, tuple(model_rows)),
        Table("detectors", "Detectors", "", detector_columns, tuple(detector_rows)),
        Table("prompts", "Prompts", "", prompt_columns, tuple(prompt_rows)),
    )
