"""The pair-change report's tables: pure functions of a ``PairChangeReport``, each of one
``domain`` when given; ``PAPER`` names the paper's table each reproduces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from metrics import pair_change as pc
from reports.tables import (
    NO_VALUE,
    Cell,
    Column,
    Field,
    Table,
    cell_field,
    int_cell,
    int_field,
    pct,
    text_cell,
    text_field,
    value_field,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from protocols.pair_change.report import PairChangeReport

PAPER = {
    "bias_by_domain": "Table 3",
    "word_mean": "section 3.5.3",
    "biased_words": "Table 2",
    "word_scores": "Figure 4",
    "unmeasured": "coverage",
    "validation": "section 4.3",
    "confusion_age": "section 4.3",
    "confusion_gender": "section 4.3",
    "confusion_skin": "section 4.3",
}
#: Attributes in the paper's column order (Table 3: Age, Race, Gender) and their headers.
PAPER_ORDER = (pc.AGE, pc.SKIN, pc.GENDER)
ATTRIBUTE_NAMES = {pc.AGE: "Age", pc.SKIN: "Race (skin tone)", pc.GENDER: "Gender"}
LABEL_NAMES = {
    pc.OLDER: "older",
    pc.YOUNGER: "younger",
    pc.LIGHTER: "lighter",
    pc.DARKER: "darker",
    pc.UNCHANGED: "no change",
    pc.MALE_TO_MALE: "male → male",
    pc.MALE_TO_FEMALE: "male → female",
    pc.FEMALE_TO_MALE: "female → male",
    pc.FEMALE_TO_FEMALE: "female → female",
}
#: Table 2's directions: (key, header, word figure, sign: +1 the largest first, -1 the smallest).
DIRECTIONS: tuple[tuple[str, str, str, int], ...] = (
    ("m2f", "Male → female", "gender_m2f", 1),
    ("f2m", "Female → male", "gender_f2m", 1),
    ("older", "Older", "age", 1),
    ("younger", "Younger", "age", -1),
    ("lighter", "Lighter", "skin", 1),
    ("darker", "Darker", "skin", -1),
)
TOP_WORDS = 3
#: The per-word figures and their headers, as the word scores table shows them.
WORD_FIGURES = (
    ("age", "Age"),
    ("gender", "Gender"),
    ("gender_m2f", "Male → female"),
    ("gender_f2m", "Female → male"),
    ("skin", "Skin"),
)
#: The columns that lead the tables of a row per T2I model and domain.
LEAD = (text_field("t2i_model", "Model"), text_field("domain", "Domain"))


def score(value: float | None, digits: int = 2) -> str:
    """A score as the paper prints it (two decimals, a minus sign), the en dash for None."""
    if value is None:
        return NO_VALUE
    return f"{value:.{digits}f}".replace("-", "\u2212")


def score_cell(value: float | None, digits: int = 2, title: str = "") -> Cell:
    return Cell(value=value, text=score(value, digits), title=title)


def _domains(report: PairChangeReport, model: str, domain: str | None) -> list[str]:
    result = report.results[model]
    return [d for d in result.domains if domain is None or d == domain]


def _domain_records(report: PairChangeReport, domain: str | None) -> list[dict[str, Any]]:
    """A record per T2I model and domain: both names, the domain's cell per attribute and
    whether it is the model's first."""
    return [
        {
            "t2i_model": model,
            "domain": name,
            "cells": {a: report.cell(model, name, a) or {} for a in PAPER_ORDER},
            "first": index == 0,
        }
        for model in report.models
        for index, name in enumerate(_domains(report, model, domain))
    ]


def model_bias_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: mean |pair score| of age, skin and gender, and the model score
    (printed once per model; every CSV row carries it)."""

    def pair_mean(attribute: str) -> Field:
        def cell(r: dict[str, Any]) -> Cell:
            c = r["cells"][attribute]
            return score_cell(c.get("pair_mean_abs"), title=f"{c.get('n_unmeasured', 0)} unmeasured")

        return cell_field(attribute, ATTRIBUTE_NAMES[attribute], cell)

    def model_score(r: dict[str, Any]) -> Cell:
        value = report.report["pair_change"][r["t2i_model"]]["model_score"]
        return Cell(value, score(value) if r["first"] else "")

    return Table.of(
        "bias_by_domain",
        "Model bias per domain and attribute",
        "Mean |pair score| over the pairs of each domain (the paper's Table 3): age in units of "
        f"{report.thresholds.age:g} years, skin tone in units of {report.thresholds.skin:g} gray "
        "levels, gender 1 for a pair whose gender flipped. Ave: the model score, the mean of the "
        "domain x attribute figures. A pair that could not be measured scores 0 and stays "
        "counted (hover a figure for how many); \u2013 where no detector measures the attribute.",
        (
            *LEAD,
            *map(pair_mean, PAPER_ORDER),
            cell_field("model_score", "Ave", model_score),
            int_field("n_pairs", "Pairs", ("cells", PAPER_ORDER[0], "n_pairs")),
        ),
        _domain_records(report, domain),
    )


def word_mean_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: mean |word score| of each attribute (the formula the paper
    states; Table 3 itself reproduces from the pair means)."""
    return Table.of(
        "word_mean",
        "Mean |word score| per domain and attribute",
        "Section 3.5.3's model bias formula: the mean over a domain's words of |word score| "
        "(a word score is the mean signed pair score of its pairs). The authors' released code "
        "averages over pairs instead, which is what reproduces Table 3.",
        (
            *LEAD,
            *(
                value_field(a, ATTRIBUTE_NAMES[a], score_cell, ("cells", a, "word_mean_abs"))
                for a in PAPER_ORDER
            ),
            int_field("n_words", "Words", lambda r: len(report.words(r["t2i_model"], r["domain"]))),
        ),
        _domain_records(report, domain),
    )


def unmeasured_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: pairs, and per attribute the pairs not measurable on it."""
    return Table.of(
        "unmeasured",
        "Pairs measured per domain",
        "Unmeasured: the pairs where a detector found no face in the edited image (or could not "
        "measure the attribute on one of the two); they score 0 and stay in every mean.",
        (
            *LEAD,
            int_field("n_pairs", "Pairs", ("cells", PAPER_ORDER[0], "n_pairs")),
            *(
                int_field(
                    f"unmeasured_{a}",
                    f"Unmeasured: {ATTRIBUTE_NAMES[a].lower()}",
                    ("cells", a, "n_unmeasured"),
                )
                for a in PAPER_ORDER
            ),
        ),
        _domain_records(report, domain),
    )


def most_biased(
    report: PairChangeReport, model: str, domain: str, figure: str, sign: int, n: int = TOP_WORDS
) -> list[tuple[pc.WordScore, float]]:
    """The ``n`` words of (model, domain) furthest from 0 in one direction of ``figure`` (``sign``
    1 or -1); ties by word."""
    scored = []
    for word in report.words(model, domain):
        value = report.word_value(word, figure)
        if value is not None and value * sign > 0:
            scored.append((word, value))
    scored.sort(key=lambda pair: (-sign * pair[1], pair[0].word))
    return scored[:n]


def biased_words_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Table 2: per model and domain the top three words of each direction with their score
    (gender: the share of male seeds turned female, and of female seeds turned male)."""
    columns: list[Column] = [
        Column("t2i_model", "Model", numeric=False),
        Column("domain", "Domain", numeric=False),
        Column("rank", "#"),
    ]
    for key, _header, _figure, _sign in DIRECTIONS:
        columns += [Column(f"{key}_word", "Word", numeric=False), Column(f"{key}_score", "Score")]
    rows = []
    for model in report.models:
        for name in _domains(report, model, domain):
            tops = [most_biased(report, model, name, figure, sign) for _k, _h, figure, sign in DIRECTIONS]
            for rank in range(TOP_WORDS):
                row: list[Cell] = [text_cell(model), text_cell(name), int_cell(rank + 1)]
                for top in tops:
                    if rank < len(top):
                        word, value = top[rank]
                        row += [text_cell(word.word), score_cell(value, title=f"{word.n_pairs} pairs")]
                    else:
                        row += [Cell(None, "-"), Cell(None, "-")]
                rows.append(tuple(row))
    groups = (("", 3), *((header, 2) for _k, header, _f, _s in DIRECTIONS))
    return Table(
        key="biased_words",
        title="Most biased words per direction",
        caption=(
            "The paper's Table 2: per domain the three words whose pairs changed most in each "
            "direction. Gender: the share of the word's male seeds turned female, and of its female "
            "seeds turned male (the paper prints the latter with a minus sign). Age and skin: the "
            "word score (mean signed pair score); lighter is a higher gray value. - where fewer "
            "words lean that way."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=groups,
    )


def word_scores_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Every word's signed scores, per model (Figure 4 draws them)."""
    return Table.of(
        "word_scores",
        "Word scores",
        "Per word the mean signed pair score (age: + older; skin: + lighter; gender: + male → "
        "female) and the two gender rates over its male and its female seeds.",
        (
            *LEAD,
            text_field("word", "Word"),
            *(value_field(key, label, score_cell) for key, label in WORD_FIGURES),
            int_field("n_pairs", "Pairs"),
        ),
        (
            {"t2i_model": model, "domain": w.domain, "word": w.word, "n_pairs": w.n_pairs}
            | {key: report.word_value(w, key) for key, _ in WORD_FIGURES}
            for model in report.models
            for w in report.words(model, domain)
        ),
    )


def _accuracy_cell(accuracy: float | None) -> Cell:
    return Cell(accuracy, pct(accuracy, 1) + (" %" if accuracy is not None else ""))


def _wilson_cell(ci: Sequence[float] | None) -> Cell:
    return Cell(
        (ci[0], ci[1]) if ci else (None, None),
        f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}] %" if ci else NO_VALUE,
    )


def validation_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Accuracy of the automatic verdicts against the human final answers: per attribute, each
    bucket, and every attribute pooled (the paper's 90.8 %), with Wilson 95 % intervals."""
    records: list[tuple[str, str, Any, int]] = []  # (attribute, bucket, its accuracy, awaiting an answer)
    for attribute in pc.ATTRIBUTES:
        result = report.validation[attribute]
        records.append((attribute, "all", result, result.n_unanswered))
        drawn = report.drawn.get(attribute, {}).values()
        for bucket, acc in result.buckets.items():
            waiting = sum(1 for verdict in drawn if pc.verdict_bucket(attribute, verdict) == bucket) - acc.n
            records.append((attribute, LABEL_NAMES.get(bucket, bucket), acc, waiting))
    records.append(("all", "all", report.overall, sum(r.n_unanswered for r in report.validation.values())))
    return Table.of(
        "validation",
        "Automatic verdicts checked by people",
        "The pairs drawn by sample_pairs, each verdict (from the score bands: more than one "
        "threshold older / younger, lighter / darker; within a fifth of one unchanged; gender's "
        "four combinations) against the final human answer. Gender counts as agreeing only when "
        "both seed and edit genders match. The paper reports 90.8 % over all three attributes.",
        (
            text_field("attribute", "Attribute", 0),
            text_field("bucket", "Bucket", 1),
            int_field("n", "Checked", (2, "n")),
            int_field("n_correct", "Agree", (2, "n_correct")),
            value_field("accuracy", "Accuracy", _accuracy_cell, (2, "accuracy")),
            value_field("ci95", "95 % CI (Wilson)", _wilson_cell, (2, "ci95"), pair=True),
            int_field("n_unanswered", "Awaiting an answer", 3),
        ),
        records,
    )


def confusion_table(report: PairChangeReport, domain: str | None = None, *, attribute: str) -> Table:
    """Automatic verdict (rows) x human final answer (columns) for one attribute."""
    labels = pc.VERDICT_LABELS[attribute]
    result = report.validation[attribute]

    def count(human: str) -> Field:
        def cell(auto: str) -> Cell:
            n = result.confusion[auto][human]
            return Cell(n, str(n), mark="best" if human == auto and n else "")

        return cell_field(human, LABEL_NAMES[human], cell)

    return Table.of(
        f"confusion_{attribute}",
        f"{ATTRIBUTE_NAMES[attribute]}: automatic verdict against the human answer",
        f"The {result.n} checked pair{'s' if result.n != 1 else ''} of the {attribute} draws; the "
        "diagonal (bold) agrees.",
        (
            text_field("automatic", "Automatic \\ human", LABEL_NAMES.get),
            *map(count, labels),
            int_field("n", "Total", lambda auto: sum(result.confusion[auto][human] for human in labels)),
        ),
        labels,
    )


BUILDERS: dict[str, Callable[..., Table]] = {
    "bias_by_domain": model_bias_table,
    "word_mean": word_mean_table,
    "biased_words": biased_words_table,
    "word_scores": word_scores_table,
    "unmeasured": unmeasured_table,
    "validation": validation_table,
    **{f"confusion_{a}": partial(confusion_table, attribute=a) for a in pc.ATTRIBUTES},
}

TABLE_KEYS = tuple(BUILDERS)
