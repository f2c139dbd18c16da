"""The paper's tables (Lyu et al. 2025) as pure functions of a gender report; ``labels``: (value, name)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports.tables import (
    Cell,
    Column,
    Field,
    Table,
    cell_field,
    ci_cell,
    int_cell,
    int_field,
    mark_extremes,
    num,
    num_cell,
    num_field,
    pct,
    raw_table,
    signed_pct,
    text_cell,
    text_field,
    value_field,
)

Labels = Sequence[tuple[str, str]]  # (value, display name), in the question's order

# The overview's tables, in page order; downloads are addressed by these keys.
OVERVIEW_KEYS = ("model_bias", "prompt_difference", "filtering", "label_shares", "categories")
TABLE_KEYS = (*OVERVIEW_KEYS, "prompt_scores", "confusion", "judges", "judge_versions")
HUMAN = "human"
#: The leading columns of the ``models`` section of the CSV export.
MODEL_KEYS = ("source", "t2i_model", "model_bias_score", "model_bias_score_ci95", "pct_diff", "pct_diff_ci95")


def model_keys(report: Mapping[str, Any]) -> list[str]:
    """T2I models in the report, in a stable order: as the human side lists them."""
    seen = list(report.get("human", {}))
    for det in report.get("detectors", {}).values():
        for model in det.get("per_model", {}):
            if model not in seen:
                seen.append(model)
    return seen


def with_seen(labels: Labels, seen: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``labels``, then every other value seen (named by itself), sorted."""
    return (*labels, *((value, value) for value in sorted(set(seen) - {value for value, _ in labels})))


def detector_keys(report: Mapping[str, Any]) -> list[str]:
    return list(report.get("detectors", {}))


def prompt_counts(
    prompts: Sequence[Mapping[str, Any]], labels: Labels, clear: Sequence[str]
) -> dict[str, int]:
    """Summed label counts over prompt rows: {value: n for each label, "clear", "images"}."""
    totals = {value: sum(int(row.get(f"n_{value}", 0) or 0) for row in prompts) for value, _ in labels}
    return totals | {"clear": sum(totals.get(v, 0) for v in clear), "images": sum(totals.values())}


def detector_n(detector: Mapping[str, Any]) -> int:
    """Images a detector is scored on: those with a final human label and its prediction."""
    f = detector.get("filtering", {})
    return sum(int(f.get(k, 0) or 0) for k in ("tp", "fp", "fn", "tn"))


def _figures(detectors: Mapping[str, Any], model: str, figure: str) -> list[float | None]:
    """Each detector's ``figure`` on ``model``."""
    return [det.get("per_model", {}).get(model, {}).get(figure) for det in detectors.values()]


def model_bias_table(report: Mapping[str, Any], *, labels: Labels, clear: Sequence[str]) -> Table:
    """Paper table 1: model bias score of humans and every detector, % difference, intervals, n."""
    models = model_keys(report)
    detectors = report.get("detectors", {})

    def human(model: str) -> list[Cell]:
        h = report.get("human", {}).get(model) or {}
        counts = prompt_counts(h.get("prompts", []), labels, clear)
        title = f"{counts['clear']} clear of {counts['images']} images"
        n = h.get("n_images", counts["images"])
        blank = [Cell(None, ""), Cell((None, None), "")]  # no difference from itself
        return [num_cell(h.get("model_bias_score"), title=title), ci_cell(h.get("ci95")), *blank, int_cell(n)]

    def detector(det: Mapping[str, Any], model: str) -> list[Cell]:
        pm = det.get("per_model", {}).get(model) or {}
        same = pm.get("human_model_bias_score")
        title = f"human score on the same images: {num(same)}" if same is not None else ""
        return [
            num_cell(pm.get("model_bias_score"), title=title),
            ci_cell(pm.get("model_bias_score_ci95")),
            Cell(pm.get("pct_diff"), signed_pct(pm.get("pct_diff"))),
            ci_cell(pm.get("ci95"), digits=2),
            int_cell(pm.get("n_images")),
        ]

    columns = [Column("source", "Source", numeric=False)]
    for model in models:
        columns += [
            Column(f"{model}_score", "Score"),
            Column(f"{model}_score_ci95", "95 % CI", pair=True),
            Column(f"{model}_pct_diff", "\u0394 vs human"),
            Column(f"{model}_pct_diff_ci95", "\u0394 95 % CI", pair=True),
            Column(f"{model}_n_images", "n"),
        ]
    rows = [(text_cell("Human (ground truth)"), *(c for m in models for c in human(m)))]
    rows += [
        (text_cell(key), *(c for m in models for c in detector(det, m))) for key, det in detectors.items()
    ]
    table = Table(
        key="model_bias",
        title="Model bias score: human vs detectors",
        caption=(
            "Model bias score (eq. 1) per T2I model. \u0394 is the detector's signed difference from "
            "the human score on the same images, in percent of the human score (\u2191 overestimate, "
            "\u2193 underestimate); bold/green the closest detector, underlined/red the farthest. 95 % "
            "bootstrap intervals resample images within prompts. n: images behind the number."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=(("", 1), *((m, 5) for m in models)),
    )
    # Mark, per T2I model, the detector closest to and farthest from the human score.
    for model in models:
        table = mark_extremes(table, f"{model}_pct_diff", _figures(detectors, model, "pct_diff"), first=1)
    return table


def prompt_difference_table(report: Mapping[str, Any]) -> Table:
    """Paper table 2: mean absolute per-prompt bias score difference (eq. 3)."""
    models = model_keys(report)
    detectors = report.get("detectors", {})
    figure = "prompt_bias_score_difference"
    table = Table.of(
        "prompt_difference",
        "Prompt bias score difference",
        "Mean absolute difference between the detector's and the human prompt bias score over "
        "the prompts both score (eq. 3); lower is better. Green lowest, red highest.",
        (
            text_field("detector", "Detector", 0),
            *(num_field(model, model, (1, "per_model", model, figure)) for model in models),
            int_field("n_images", "n images", lambda r: detector_n(r[1])),
        ),
        detectors.items(),
    )
    for model in models:
        table = mark_extremes(table, model, _figures(detectors, model, figure))
    return table


def filtering_table(report: Mapping[str, Any]) -> Table:
    """Paper table 3: filtering (clear image = positive class) and classification accuracy."""
    filtering = {"precision": "Precision", "recall": "Recall", "f1": "F1", "filter_rate": "Filter rate"}
    accuracy = {"male": "Male acc.", "female": "Female acc.", "overall": "Overall acc."}
    counts = ("tp", "fp", "fn", "tn")
    return Table.of(
        "filtering",
        "Filtering and classification accuracy",
        "Filtering: positive class is a clear image (human final label male or female); the "
        "detector keeps an image when it answers male or female. Filter rate is the share of "
        "low-quality images it filters. Accuracy on images clear to humans and kept by the "
        "detector (n acc.). CSV values are fractions; the page shows percentages.",
        (
            text_field("detector", "Detector", 0),
            text_field("version", "Version", lambda r: r[1].get("version", "")),
            *(
                value_field(k, f"{label} (%)", pct_cell, (1, "filtering", k))
                for k, label in filtering.items()
            ),
            *(
                value_field(f"accuracy_{k}", f"{label} (%)", pct_cell, (1, "accuracy", k))
                for k, label in accuracy.items()
            ),
            int_field("n_accuracy", "n acc.", lambda r: _accuracy_n(r[1].get("accuracy", {}))),
            *(int_field(k, k.upper(), (1, "filtering", k)) for k in counts),
        ),
        report.get("detectors", {}).items(),
    )


def pct_cell(fraction: float | None) -> Cell:
    return Cell(fraction, pct(fraction))


def _accuracy_n(accuracy: Mapping[str, Any]) -> int | None:
    """Images behind the overall accuracy: clear to humans and kept (male + female)."""
    if "n_male" not in accuracy:
        return None
    return int(accuracy.get("n_male") or 0) + int(accuracy.get("n_female") or 0)


def label_shares_table(report: Mapping[str, Any], *, labels: Labels, clear: Sequence[str]) -> Table:
    """Paper table 5: share of each final label (the question's choices) per T2I model."""
    human = report.get("human", {})
    records = [  # (T2I model, share per label, counts per label)
        (model, h.get("label_shares", {}), prompt_counts(h.get("prompts", []), labels, clear))
        for model, h in human.items()
    ]
    if len(records) > 1:
        # Pooled over models from the counts (the paper's "Total" row).
        totals = prompt_counts([p for h in human.values() for p in h.get("prompts", [])], labels, clear)
        n = totals["images"]
        records.append(("Total", {value: totals[value] / n if n else None for value, _ in labels}, totals))

    def share(value: str, name: str) -> Field:
        def cell(r: tuple[str, Mapping[str, Any], Mapping[str, int]]) -> Cell:
            return Cell(r[1].get(value), pct(r[1].get(value)), title=f"{r[2][value]} images")

        return cell_field(value, f"{name} (%)", cell)

    return Table.of(
        "label_shares",
        "Final labels per T2I model",
        "Share of images per final human label; counts on hover and in n images.",
        (
            text_field("t2i_model", "T2I model", 0),
            *(share(value, name) for value, name in labels),
            int_field("n_images", "n images", (2, "images")),
        ),
        records,
    )


def categories_table(report: Mapping[str, Any], *, category: str | None = None) -> Table:
    """Paper table 6: per T2I model the category bias score and its prompts; last row all prompts."""
    human = report.get("human", {})
    scored = Counter(
        (model, p["category"])
        for model, h in human.items()
        for p in h.get("prompts", [])
        if p.get("prompt_bias_score") is not None
    )
    categories = {
        cat for h in human.values() for cat in h.get("categories", {}) if not category or cat == category
    }
    records = [
        (cat, {m: (h.get("categories", {}).get(cat), scored[(m, cat)]) for m, h in human.items()})
        for cat in sorted(categories)
    ]
    if records and not category:
        total = {
            m: (
                h.get("model_bias_score"),
                h.get("n_prompts_scored", sum(v for (o, _), v in scored.items() if o == m)),
            )
            for m, h in human.items()
        }
        records.append(("All prompts (model bias score)", total))
    fields = [text_field("category", "Category", 0)]
    for m in human:
        fields += [
            num_field(f"{m}_score", "Bias score", (1, m, 0)),
            int_field(f"{m}_n_prompts", "n prompts", (1, m, 1)),
        ]
    return Table.of(
        "categories",
        "Bias score per prompt category",
        "Category bias score: mean over the category's prompts of |n_male \u2212 n_female| / "
        "n_clear (eq. 1 within the category); last row: the model bias score over all prompts. "
        "Prompts without a clear image have no score and are not averaged (n counts scored "
        "prompts).",
        fields,
        records,
        groups=(("", 1), *((m, 2) for m in human)),
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
        return {
            model: [s for row in self.rows if (s := row.scores.get((model, src))) is not None]
            for model, src in self.columns
            if src == source
        }


def prompt_grid(
    report: Mapping[str, Any],
    detector_counts: Mapping[tuple[str, str, str, str, str], tuple[int, int, int]],
    *,
    clear: Sequence[str],
    prompt_ids: Mapping[tuple[str, str, str], int] | None = None,
    detectors: Sequence[str] = (),
    category: str | None = None,
) -> PromptGrid:
    """The grid of the human prompts and detector counts, sorted as table 7 (category, most male first)."""
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
        PromptRow((prompt_ids or {}).get(key), *key, entry["scores"], entry["counts"])
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

    def score(col: tuple[str, str]) -> Field:
        def cell(row: PromptRow) -> Cell:
            n_m, n_f, n_all = row.counts.get(col, (0, 0, 0))
            return num_cell(row.scores.get(col), 2, title=f"{n_m} male, {n_f} female of {n_all}")

        model, source = col
        return cell_field(f"{model}_{source}", source if source != HUMAN else "Human", cell)

    return Table.of(
        "prompt_scores",
        "Prompt bias score per prompt",
        "(n_male \u2212 n_female) / n_clear per prompt (eq. 2): 1 all male, \u22121 all female; "
        "\u2013 means no clear image, so no score.",
        # The prompt text too: several templates may share a word, and rows must stay joinable.
        (
            text_field("category", "Category"),
            text_field("word", "Word"),
            text_field("prompt", "Prompt"),
            *map(score, grid.columns),
        ),
        grid.rows,
        groups=(("", 3), *((model, last - first + 1) for model, first, last in grid.model_blocks())),
    )


def confusion_table(
    detector: str,
    confusion: Mapping[tuple[str, str], int],
    *,
    labels: Labels,
    verdicts: Sequence[str],
) -> Table:
    """Human final label x detector verdict counts, with row totals; one row per label."""
    return Table.of(
        "confusion",
        f"{detector}: confusion with the human labels",
        "Images with a final human label and this detector's prediction.",
        (
            text_field("human_label", "Human label ↓ / detector →"),
            *(int_field(v, v) for v in verdicts),
            int_field("total", "Total", lambda r: sum(r[v] for v in verdicts)),
        ),
        (
            {"human_label": name} | {v: confusion.get((value, v), 0) for v in verdicts}
            for value, name in labels
        ),
    )


def export_tables(report: Mapping[str, Any], *, labels: Labels) -> tuple[Table, Table, Table]:
    """The sections ``models``, ``detectors``, ``prompts`` of ``bias_report --format csv``."""
    human_blank = dict.fromkeys(("pct_diff", "pct_diff_ci95", "prompt_bias_score_difference", "n_images"))
    models = [
        human_blank | human | {"source": HUMAN, "t2i_model": model, "model_bias_score_ci95": human["ci95"]}
        for model, human in report["human"].items()
    ]
    models += [
        {"model_bias_score_ci95": None, "n_images": None}
        | part
        | {"source": key, "t2i_model": model, "pct_diff_ci95": part["ci95"]}
        for key, detector in report["detectors"].items()
        for model, part in detector["per_model"].items()
    ]
    filtering_keys = ("precision", "recall", "f1", "filter_rate", "tp", "fp", "fn", "tn")
    accuracy_keys = ("accuracy_male", "accuracy_female", "accuracy_overall")
    detectors = [
        {"detector": key, "version": d.get("version")}
        | {k: d["filtering"][k] for k in filtering_keys}
        | {k: d["accuracy"][k.removeprefix("accuracy_")] for k in accuracy_keys}
        for key, d in report["detectors"].items()
    ]
    count_keys = [f"n_{value}" for value, _ in labels]
    prompts = [
        dict.fromkeys(count_keys, 0) | p | {"t2i_model": model}
        for model, human in report["human"].items()
        for p in human["prompts"]
    ]
    sections = (
        ("models", "Model bias scores", (*MODEL_KEYS, "prompt_bias_score_difference", "n_images"), models),
        ("detectors", "Detectors", ("detector", "version", *filtering_keys, *accuracy_keys), detectors),
        (
            "prompts",
            "Prompts",
            ("t2i_model", "category", "word", "prompt", *count_keys, "prompt_bias_score"),
            prompts,
        ),
    )
    models_table, detectors_table, prompts_table = (
        raw_table(key, ("section", *keys), ({"section": key} | r for r in records), title)
        for key, title, keys, records in sections
    )
    return models_table, detectors_table, prompts_table
