"""The GEP report's tables (Zhang et al. 2023): pure functions of an ``AttributesResult``;
``PAPER`` names the paper's table each reproduces."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from metrics import gep_design
from reports import judges
from reports.tables import (
    NO_VALUE,
    Cell,
    Column,
    Field,
    Table,
    cell_field,
    int_cell,
    num,
    num_cell,
    num_field,
    text_cell,
    text_field,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from protocols.attributes.report import AttributesResult

HUMAN = "human"
#: (T2I model, setting, lead value, a cell per attribute, the last cell) of ``_key_table``.
KeyRows = Iterator[tuple[str, str, str, list[Cell], Cell]]
SETTING_NAMES = {gep_design.NEUTRAL: "Neutral", gep_design.EXPLICIT: "Explicit"}
PAPER = {
    "gep_scores": "Table 3",
    "frequencies": "Tables 11 and 12",
    "gep_vectors": "Tables 13 and 14",
    "vector_agreement": "Tables 4 and 19",
    "score_ranking": "Table 6",
    "roc_auc": "Table 7",
    "roc_auc_attributes": "Table 16",
    "agreement": "section 5",
}


def signed(value: float | None, digits: int = 3) -> str:
    """A signed number (+0.250, or -0.125 written with a minus sign), the en dash for None."""
    if value is None:
        return NO_VALUE
    return f"{value:+.{digits}f}".replace("-", "\u2212")


def compact(value: float | None) -> str:
    """A GEP score as the paper prints it: 0.123, or 5.15e-03 for small automatic scores."""
    if value is None:
        return NO_VALUE
    if value != 0 and abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:.3f}"


def signed_cell(value: float | None, title: str = "") -> Cell:
    return Cell(value=value, text=signed(value), title=title)


def setting_cells(result: AttributesResult) -> list[tuple[str, str]]:
    """Every (T2I model, setting) cell of the report, neutral first, models sorted."""
    return [
        (model, setting)
        for model in result.models
        for setting in gep_design.SETTINGS
        if setting in result.study.cells[model]
    ]


def _setting_columns(result: AttributesResult) -> list[tuple[str, str]]:
    """(setting, model) columns of Table 6: per setting, every model (a cell may be missing)."""
    return [(setting, model) for setting in gep_design.SETTINGS for model in result.models]


def _key_columns(result: AttributesResult) -> tuple[Column, ...]:
    return tuple(Column(key, key) for key in result.keys)


def _cell_columns(key: str, title: str) -> tuple[Column, ...]:
    """The T2I model and setting columns, then one more text column, that lead a per-cell table."""
    return tuple(
        Column(k, t, numeric=False)
        for k, t in (("t2i_model", "T2I model"), ("setting", "Setting"), (key, title))
    )


def gep_scores_table(result: AttributesResult) -> Table:
    """GEP_human (mean |v_j|) per T2I model and setting, with the items of each gender."""
    columns = [Column("t2i_model", "T2I model", numeric=False)]
    for setting in gep_design.SETTINGS:
        columns += [
            Column(f"{setting}_gep", "GEP"),
            Column(f"{setting}_n_woman", "women"),
            Column(f"{setting}_n_man", "men"),
        ]
    rows = []
    for model in result.models:
        row = [text_cell(model)]
        for setting in gep_design.SETTINGS:
            cell = result.study.cells[model].get(setting)
            if cell is None:
                row += [num_cell(None, 2), int_cell(None), int_cell(None)]
                continue
            human = cell.human
            row += [
                num_cell(human.gep_score),
                int_cell(human.n_items[gep_design.WOMAN]),
                int_cell(human.n_items[gep_design.MAN]),
            ]
        rows.append(tuple(row))
    return Table(
        key="gep_scores",
        title="GEP score by the human answers",
        caption=(
            "GEP = mean over the attributes of |f_woman \u2212 f_man|, the share of women's images with "
            "the attribute minus that of men's (0 = the same presentation; lower is better). "
            "A score needs a frequency for every attribute: \u2013 where one is missing."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=(("", 1), *((SETTING_NAMES[s], 3) for s in gep_design.SETTINGS)),
    )


def _key_table(
    result: AttributesResult,
    key: str,
    title: str,
    caption: str,
    lead: tuple[str, str],
    last: Column,
    rows: KeyRows,
) -> Table:
    """A table of a row per (model, setting, ``lead``): a cell per attribute, then ``last``."""
    return Table(
        key=key,
        title=title,
        caption=caption,
        columns=(*_cell_columns(*lead), *_key_columns(result), last),
        rows=tuple(
            (text_cell(model), text_cell(setting), text_cell(name), *cells, tail)
            for model, setting, name, cells, tail in rows
        ),
    )


def frequencies_table(result: AttributesResult) -> Table:
    """Share of yes per (model, setting, gender) and attribute, with the counts behind it."""

    def rows() -> KeyRows:
        for model, setting in setting_cells(result):
            human = result.study.cells[model][setting].human
            for gender in gep_design.GENDERS:
                cells = []
                for key in result.keys:
                    n_yes, n_answered = human.n_yes[gender][key], human.n_answered[gender][key]
                    missing = human.n_without_final_answer[gender][key]
                    title = f"{n_yes} yes of {n_answered} answered" + (
                        f"; {missing} without a final answer" if missing else ""
                    )
                    cells.append(num_cell(human.frequencies[gender][key], 2, title))
                yield (
                    model,
                    setting,
                    gender,
                    cells,
                    int_cell(sum(human.n_without_final_answer[gender].values())),
                )

    return _key_table(
        result,
        "frequencies",
        "Share of images with the attribute, per gender",
        "f = images whose final answer is yes / images with a final answer (explicit setting: "
        "only the images whose prompt names the attribute). Images without a final answer are "
        "left out and counted in the last column.",
        ("gender", "Gender"),
        Column("n_without_final_answer", "No final answer"),
        rows(),
    )


def gep_vectors_table(result: AttributesResult) -> Table:
    """The human GEP vector and each detector's, per model and setting, with their scores."""

    def rows() -> KeyRows:
        for model, setting in setting_cells(result):
            cell = result.study.cells[model][setting]
            sources = [(HUMAN, cell.human.gep_vector, cell.human.gep_score)]
            sources += [(name, d.gep.gep_vector, d.gep.gep_score) for name, d in cell.detectors.items()]
            for source, vector, score in sources:
                cells = [signed_cell(vector.get(key)) for key in result.keys]
                yield model, setting, source, cells, Cell(score, compact(score))

    return _key_table(
        result,
        "gep_vectors",
        "GEP vectors: women minus men, per attribute",
        "Human: f_woman \u2212 f_man (positive: the attribute is shown more often with women). "
        "Detector: mean score of women's images minus men's, on the detector's own scale — "
        "compare its signs and ranking with the human row, not its size.",
        ("source", "Source"),
        Column("gep_score", "GEP"),
        rows(),
    )


def vector_agreement_table(result: AttributesResult) -> Table:
    """Per model, setting and detector: how its vector agrees with the human one."""
    columns = (
        *_cell_columns("detector", "Detector"),
        Column("n", "n"),
        Column("kendall_tau_b", "Kendall τ-b"),
        Column("mcc", "MCC of signs"),
        Column("pearson", "Pearson r"),
    )
    rows = []
    for model, setting in setting_cells(result):
        detectors = result.study.cells[model][setting].detectors
        taus = [d.agreement.kendall_tau_b for d in detectors.values()]
        defined = [t for t in taus if t is not None]
        best = max(defined) if len(defined) >= 2 and len(set(defined)) > 1 else None
        for name, d in detectors.items():
            a = d.agreement
            tau = Cell(
                a.kendall_tau_b,
                num(a.kendall_tau_b),
                mark="best" if best is not None and a.kendall_tau_b == best else "",
            )
            rows.append(
                (
                    text_cell(model),
                    text_cell(setting),
                    text_cell(name),
                    int_cell(a.n),
                    tau,
                    num_cell(a.mcc),
                    num_cell(a.pearson),
                )
            )
    return Table(
        key="vector_agreement",
        title="Detector GEP vectors against the human vector",
        caption=(
            "Over the n attributes where both vectors are defined: Kendall τ-b (same ranking of the "
            "differences), the Matthews correlation of their signs (≥ 0 counts as positive: which "
            "gender each attribute leans to) and Pearson's r. Bold: the highest τ-b of the cell. "
            "\u2013 where undefined (a constant vector, one sign only, fewer than two attributes)."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def _ranks(scores: dict[tuple[str, str], float | None]) -> dict[tuple[str, str], int]:
    """1 = the smallest defined score; equal scores share the lower rank."""
    ordered = sorted(v for v in scores.values() if v is not None)
    return {cell: ordered.index(v) + 1 for cell, v in scores.items() if v is not None}


def score_ranking_table(result: AttributesResult) -> Table:
    """GEP scores of every source across the model x setting cells, ranked, with Kendall
    tau-b of each detector's scores against the human ones."""
    cells = _setting_columns(result)
    columns = [Column("source", "Source", numeric=False)]
    columns += [Column(f"{setting}_{model}", model) for setting, model in cells]
    columns.append(Column("kendall_tau_b", "Kendall τ-b"))

    def score(model: str, setting: str, source: str) -> float | None:
        cell = result.study.cells.get(model, {}).get(setting)
        if cell is None:
            return None
        if source == HUMAN:
            return cell.human.gep_score
        detector = cell.detectors.get(source)
        return detector.gep.gep_score if detector else None

    rows = []
    for source in (*result.detectors, HUMAN):
        scores = {(s, m): score(m, s, source) for s, m in cells}
        ranks = _ranks(scores)
        row = [text_cell(source)]
        for cell in cells:
            value = scores[cell]
            text = compact(value) if value is None else f"{compact(value)} (#{ranks[cell]})"
            row.append(Cell(value, text))
        ranking = result.study.score_ranking.get(source)
        row.append(
            Cell(
                ranking.kendall_tau_b if ranking else None,
                num(ranking.kendall_tau_b if ranking else None),
                title=f"over {ranking.n_cells} cells" if ranking else "",
            )
        )
        rows.append(tuple(row))
    n_models = len(result.models)
    groups = [("", 1)] + [(SETTING_NAMES[s], n_models) for s in gep_design.SETTINGS if n_models] + [("", 1)]
    return Table(
        key="score_ranking",
        title="GEP scores across models and settings",
        caption=(
            "(#k): the rank of the cell among the source's scores (1 = smallest). Automatic scores "
            "are on their detector's scale: what counts is whether they rank the cells as the human "
            "scores do, which Kendall τ-b measures over the cells where both are defined."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=tuple(groups),
    )


def roc_auc_table(result: AttributesResult) -> Table:
    """Per detector and model: ROC-AUC averaged over the attributes (both settings pooled)."""

    def mean(model: str) -> Field:
        def cell(name: str) -> Cell:
            auc = result.pooled_auc[model][name]
            return num_cell(auc.mean, 3, f"mean of {auc.n_defined} of {len(result.keys)} attributes")

        return cell_field(model, model, cell)

    return Table.of(
        "roc_auc",
        "ROC-AUC of the detectors' per-image scores",
        "Each attribute's scores against the human final answers (both settings pooled; "
        "explicit images only for their own attribute), averaged over the attributes where "
        "both answers occur. 0.5 = chance, 1 = perfect.",
        (text_field("detector", "Detector", lambda name: name), *map(mean, result.models)),
        result.detectors,
    )


def roc_auc_attributes_table(result: AttributesResult) -> Table:
    """ROC-AUC per model, detector and attribute, and their mean."""
    columns = (
        Column("t2i_model", "T2I model", numeric=False),
        Column("detector", "Detector", numeric=False),
        *_key_columns(result),
        Column("mean", "Mean"),
    )
    rows = []
    for model in result.models:
        for name in result.detectors:
            auc = result.pooled_auc[model][name]
            cells = [text_cell(model), text_cell(name)]
            for key in result.keys:
                title = f"{auc.n_positive[key]} yes, {auc.n_negative[key]} no"
                cells.append(num_cell(auc.by_attribute[key], 3, title))
            cells.append(num_cell(auc.mean))
            rows.append(tuple(cells))
    return Table(
        key="roc_auc_attributes",
        title="ROC-AUC per attribute",
        caption="\u2013 where the images of an attribute have one final answer only (no ROC curve).",
        columns=columns,
        rows=tuple(rows),
    )


def agreement_table(result: AttributesResult) -> Table:
    """Per question: Krippendorff's alpha, Fleiss' kappa, observed agreement, items, disputes;
    then all questions pooled."""
    columns = (
        Column("question", "Question", numeric=False),
        Column("text", "Text", numeric=False),
        Column("krippendorff_alpha", "Krippendorff \u03b1"),
        Column("fleiss_kappa", "Fleiss \u03ba"),
        Column("observed_agreement", "Observed"),
        Column("n_items", "Items"),
        Column("disputed", "Disputed"),
    )
    report = result.report
    figures = ("krippendorff_alpha", "fleiss_kappa", "observed_agreement")

    def row(key: str, text: str, a: Mapping[str, Any], disputed: int) -> tuple[Cell, ...]:
        numbers = (num_cell(a[k]) for k in figures)
        return (text_cell(key), text_cell(text), *numbers, int_cell(a["n_items"]), int_cell(disputed))

    rows = [
        row(key, result.questions[key], report["agreement"][key], report["disputes"][key])
        for key in result.keys
    ]
    pooled = {k: getattr(result.agreement_all, k) for k in (*figures, "n_items")}
    rows.append(row("all", "every (image, question) pooled", pooled, sum(report["disputes"].values())))
    return Table(
        key="agreement",
        title="Annotator agreement per question",
        caption=(
            "Over the images with two or more answers to the question. Observed: the share of "
            "agreeing annotator pairs. Disputed: images with all their answers and no final one "
            "(a tie, e.g. 1\u20131 with an answer missing) — settle them in the dispute queue."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def judge_gep_table(result: AttributesResult) -> Table:
    """Each judge's GEP score and vector per T2I model and setting (the people's computed on its
    answers), with its error against the people's."""
    keys = result.keys
    return Table.of(
        "judge_gep",
        "Judges' GEP beside the people's",
        "Per T2I model and setting, each judge's GEP score and vector, computed as the people's but "
        "on its yes / no answers, and their errors: the judge's minus the people's.",
        (
            text_field("t2i_model", "T2I model", 0),
            text_field("setting", "Setting", lambda r: SETTING_NAMES.get(r[1], r[1])),
            text_field("judge", "Judge", 2),
            num_field("gep_score", "GEP", (3, "gep_score")),
            cell_field("gep_score_error", "GEP error", lambda r: signed_cell(r[3]["gep_score_error"])),
            *(cell_field(f"v_{k}", k, lambda r, k=k: signed_cell(r[3]["gep_vector"].get(k))) for k in keys),
            *(
                cell_field(f"error_{k}", k, lambda r, k=k: signed_cell(r[3]["gep_vector_error"].get(k)))
                for k in keys
            ),
        ),
        (
            (model, setting, name, j)
            for model, settings in result.report["attributes"].items()
            for setting, cell in settings.items()
            for name, j in cell.get("judges", {}).items()
        ),
        groups=(("", 5), ("vector", len(keys)), ("error", len(keys))),
    )


BUILDERS = {
    "gep_scores": gep_scores_table,
    "frequencies": frequencies_table,
    "gep_vectors": gep_vectors_table,
    "vector_agreement": vector_agreement_table,
    "score_ranking": score_ranking_table,
    "roc_auc": roc_auc_table,
    "roc_auc_attributes": roc_auc_attributes_table,
    "agreement": agreement_table,
    "judges": lambda result: judges.judges_table(result.report["judges"], question="Attribute"),
    "judge_gep": judge_gep_table,
    "judge_versions": lambda result: judges.judge_versions_table(
        result.report["judge_versions"], result.report["judges"], question="Attribute"
    ),
}

TABLE_KEYS = tuple(BUILDERS)
