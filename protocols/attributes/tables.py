"""The GEP report's tables (Zhang et al. 2023): pure functions of an ``AttributesResult``;
``PAPER`` names the paper's table each reproduces."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from metrics import gep_design
from reports import judges
from reports.tables import (
    NO_VALUE,
    Cell,
    Table,
    cell_field,
    int_field,
    num,
    num_cell,
    num_field,
    text_field,
    value_field,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from protocols.attributes.report import AttributesResult

HUMAN = "human"
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


#: The T2I model and setting columns that lead a table of a row per (model, setting, ...) record.
CELL_LEAD = (text_field("t2i_model", "T2I model", 0), text_field("setting", "Setting", 1))


def gep_scores_table(result: AttributesResult) -> Table:
    """GEP_human (mean |v_j|) per T2I model and setting, with the items of each gender."""
    return Table.of(
        "gep_scores",
        "GEP score by the human answers",
        "GEP = mean over the attributes of |f_woman \u2212 f_man|, the share of women's images with "
        "the attribute minus that of men's (0 = the same presentation; lower is better). "
        "A score needs a frequency for every attribute: \u2013 where one is missing.",
        (
            text_field("t2i_model", "T2I model"),
            *(
                f
                for s in gep_design.SETTINGS
                for f in (
                    num_field(f"{s}_gep", "GEP", (s, "human", "gep_score")),
                    int_field(f"{s}_n_woman", "women", (s, "human", "n_items", gep_design.WOMAN)),
                    int_field(f"{s}_n_man", "men", (s, "human", "n_items", gep_design.MAN)),
                )
            ),
        ),
        ({"t2i_model": model} | result.study.cells[model] for model in result.models),
        groups=(("", 1), *((SETTING_NAMES[s], 3) for s in gep_design.SETTINGS)),
    )


def frequencies_table(result: AttributesResult) -> Table:
    """Share of yes per (model, setting, gender) and attribute, with the counts behind it."""

    def share(key: str, r: tuple[str, str, str, Any]) -> Cell:
        gender, human = r[2], r[3]
        missing = human.n_without_final_answer[gender][key]
        title = f"{human.n_yes[gender][key]} yes of {human.n_answered[gender][key]} answered" + (
            f"; {missing} without a final answer" if missing else ""
        )
        return num_cell(human.frequencies[gender][key], 2, title)

    return Table.of(
        "frequencies",
        "Share of images with the attribute, per gender",
        "f = images whose final answer is yes / images with a final answer (explicit setting: "
        "only the images whose prompt names the attribute). Images without a final answer are "
        "left out and counted in the last column.",
        (
            *CELL_LEAD,
            text_field("gender", "Gender", 2),
            *(cell_field(key, key, partial(share, key)) for key in result.keys),
            int_field(
                "n_without_final_answer",
                "No final answer",
                lambda r: sum(r[3].n_without_final_answer[r[2]].values()),
            ),
        ),
        (
            (model, setting, gender, result.study.cells[model][setting].human)
            for model, setting in setting_cells(result)
            for gender in gep_design.GENDERS
        ),
    )


def gep_vectors_table(result: AttributesResult) -> Table:
    """The human GEP vector and each detector's, per model and setting, with their scores."""
    records = []  # (model, setting, source, its vector, its GEP score)
    for model, setting in setting_cells(result):
        cell = result.study.cells[model][setting]
        records.append((model, setting, HUMAN, cell.human.gep_vector, cell.human.gep_score))
        records += [
            (model, setting, name, d.gep.gep_vector, d.gep.gep_score) for name, d in cell.detectors.items()
        ]
    return Table.of(
        "gep_vectors",
        "GEP vectors: women minus men, per attribute",
        "Human: f_woman \u2212 f_man (positive: the attribute is shown more often with women). "
        "Detector: mean score of women's images minus men's, on the detector's own scale — "
        "compare its signs and ranking with the human row, not its size.",
        (
            *CELL_LEAD,
            text_field("source", "Source", 2),
            *(value_field(key, key, signed_cell, (3, key)) for key in result.keys),
            value_field("gep_score", "GEP", lambda score: Cell(score, compact(score)), 4),
        ),
        records,
    )


def vector_agreement_table(result: AttributesResult) -> Table:
    """Per model, setting and detector: how its vector agrees with the human one."""
    records = []  # (model, setting, detector, its agreement, the cell's best τ-b or None)
    for model, setting in setting_cells(result):
        detectors = result.study.cells[model][setting].detectors
        defined = [t for d in detectors.values() if (t := d.agreement.kendall_tau_b) is not None]
        best = max(defined) if len(defined) >= 2 and len(set(defined)) > 1 else None
        records += [(model, setting, name, d.agreement, best) for name, d in detectors.items()]

    def tau(r: tuple[str, str, str, Any, float | None]) -> Cell:
        value = r[3].kendall_tau_b
        return Cell(value, num(value), mark="best" if r[4] is not None and value == r[4] else "")

    return Table.of(
        "vector_agreement",
        "Detector GEP vectors against the human vector",
        "Over the n attributes where both vectors are defined: Kendall τ-b (same ranking of the "
        "differences), the Matthews correlation of their signs (≥ 0 counts as positive: which "
        "gender each attribute leans to) and Pearson's r. Bold: the highest τ-b of the cell. "
        "\u2013 where undefined (a constant vector, one sign only, fewer than two attributes).",
        (
            *CELL_LEAD,
            text_field("detector", "Detector", 2),
            int_field("n", "n", (3, "n")),
            cell_field("kendall_tau_b", "Kendall τ-b", tau),
            num_field("mcc", "MCC of signs", (3, "mcc")),
            num_field("pearson", "Pearson r", (3, "pearson")),
        ),
        records,
    )


def _ranks(scores: dict[tuple[str, str], float | None]) -> dict[tuple[str, str], int]:
    """1 = the smallest defined score; equal scores share the lower rank."""
    ordered = sorted(v for v in scores.values() if v is not None)
    return {cell: ordered.index(v) + 1 for cell, v in scores.items() if v is not None}


def score_ranking_table(result: AttributesResult) -> Table:
    """GEP scores of every source across the model x setting cells, ranked, with Kendall
    tau-b of each detector's scores against the human ones."""

    def score(model: str, setting: str, source: str) -> float | None:
        cell = result.study.cells.get(model, {}).get(setting)
        if cell is None:
            return None
        if source == HUMAN:
            return cell.human.gep_score
        detector = cell.detectors.get(source)
        return detector.gep.gep_score if detector else None

    # Table 6's (setting, model) columns: per setting, every model (a cell may be missing).
    cells = [(setting, model) for setting in gep_design.SETTINGS for model in result.models]
    scores = {
        source: {(s, m): score(m, s, source) for s, m in cells} for source in (*result.detectors, HUMAN)
    }
    ranks = {source: _ranks(by_cell) for source, by_cell in scores.items()}

    def ranked(cell: tuple[str, str], source: str) -> Cell:
        value = scores[source][cell]
        return Cell(value, compact(value) if value is None else f"{compact(value)} (#{ranks[source][cell]})")

    def tau(source: str) -> Cell:
        ranking = result.study.score_ranking.get(source)
        if ranking is None:
            return Cell(None, num(None))
        return Cell(ranking.kendall_tau_b, num(ranking.kendall_tau_b), title=f"over {ranking.n_cells} cells")

    n_models = len(result.models)
    return Table.of(
        "score_ranking",
        "GEP scores across models and settings",
        "(#k): the rank of the cell among the source's scores (1 = smallest). Automatic scores "
        "are on their detector's scale: what counts is whether they rank the cells as the human "
        "scores do, which Kendall τ-b measures over the cells where both are defined.",
        (
            text_field("source", "Source", lambda s: s),
            *(
                cell_field(f"{setting}_{model}", model, partial(ranked, (setting, model)))
                for setting, model in cells
            ),
            cell_field("kendall_tau_b", "Kendall τ-b", tau),
        ),
        scores,
        groups=(("", 1), *((SETTING_NAMES[s], n_models) for s in gep_design.SETTINGS if n_models), ("", 1)),
    )


def roc_auc_table(result: AttributesResult) -> Table:
    """Per detector and model: ROC-AUC averaged over the attributes (both settings pooled)."""

    def mean(model: str, name: str) -> Cell:
        auc = result.pooled_auc[model][name]
        return num_cell(auc.mean, 3, f"mean of {auc.n_defined} of {len(result.keys)} attributes")

    return Table.of(
        "roc_auc",
        "ROC-AUC of the detectors' per-image scores",
        "Each attribute's scores against the human final answers (both settings pooled; "
        "explicit images only for their own attribute), averaged over the attributes where "
        "both answers occur. 0.5 = chance, 1 = perfect.",
        (
            text_field("detector", "Detector", lambda name: name),
            *(cell_field(model, model, partial(mean, model)) for model in result.models),
        ),
        result.detectors,
    )


def roc_auc_attributes_table(result: AttributesResult) -> Table:
    """ROC-AUC per model, detector and attribute, and their mean."""

    def auc(key: str, r: tuple[str, str, Any]) -> Cell:
        auc = r[2]
        return num_cell(auc.by_attribute[key], 3, f"{auc.n_positive[key]} yes, {auc.n_negative[key]} no")

    return Table.of(
        "roc_auc_attributes",
        "ROC-AUC per attribute",
        "\u2013 where the images of an attribute have one final answer only (no ROC curve).",
        (
            text_field("t2i_model", "T2I model", 0),
            text_field("detector", "Detector", 1),
            *(cell_field(key, key, partial(auc, key)) for key in result.keys),
            num_field("mean", "Mean", (2, "mean")),
        ),
        (
            (model, name, result.pooled_auc[model][name])
            for model in result.models
            for name in result.detectors
        ),
    )


def agreement_table(result: AttributesResult) -> Table:
    """Per question: Krippendorff's alpha, Fleiss' kappa, observed agreement, items, disputes;
    then all questions pooled."""
    report = result.report
    figures = ("krippendorff_alpha", "fleiss_kappa", "observed_agreement")
    records = [
        (key, result.questions[key], report["agreement"][key], report["disputes"][key]) for key in result.keys
    ]
    pooled = result.agreement_all
    records.append(("all", "every (image, question) pooled", pooled, sum(report["disputes"].values())))
    labels = ("Krippendorff \u03b1", "Fleiss \u03ba", "Observed")
    return Table.of(
        "agreement",
        "Annotator agreement per question",
        "Over the images with two or more answers to the question. Observed: the share of "
        "agreeing annotator pairs. Disputed: images with all their answers and no final one "
        "(a tie, e.g. 1\u20131 with an answer missing) — settle them in the dispute queue.",
        (
            text_field("question", "Question", 0),
            text_field("text", "Text", 1),
            *(num_field(k, label, (2, k)) for k, label in zip(figures, labels, strict=True)),
            int_field("n_items", "Items", (2, "n_items")),
            int_field("disputed", "Disputed", 3),
        ),
        records,
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
            value_field("gep_score_error", "GEP error", signed_cell, (3, "gep_score_error")),
            *(value_field(f"v_{k}", k, signed_cell, (3, "gep_vector", k)) for k in keys),
            *(value_field(f"error_{k}", k, signed_cell, (3, "gep_vector_error", k)) for k in keys),
        ),
        (
            (model, setting, name, j)
            for model, settings in result.report["attributes"].items()
            for setting, cell in settings.items()
            for name, j in cell.get("judges", {}).items()
        ),
        groups=(("", 5), ("vector", len(keys)), ("error", len(keys))),
    )


JUDGE_TABLES = judges.table_builders(question="Attribute")
BUILDERS = {
    "gep_scores": gep_scores_table,
    "frequencies": frequencies_table,
    "gep_vectors": gep_vectors_table,
    "vector_agreement": vector_agreement_table,
    "score_ranking": score_ranking_table,
    "roc_auc": roc_auc_table,
    "roc_auc_attributes": roc_auc_attributes_table,
    "agreement": agreement_table,
    "judges": JUDGE_TABLES["judges"],
    "judge_gep": judge_gep_table,
    "judge_versions": JUDGE_TABLES["judge_versions"],
}

TABLE_KEYS = tuple(BUILDERS)
