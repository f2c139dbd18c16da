"""The pair-change report's tables: pure functions of a ``PairChangeReport``, each of one
``domain`` when given; ``PAPER`` names the paper's table each reproduces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from metrics import pair_change as pc
from reports.tables import NO_VALUE, Cell, Column, Table, int_cell, pct, text_cell

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


def _domain_rows(
    report: PairChangeReport,
    domain: str | None,
    figures: Callable[[str, str, list[dict[str, Any]]], Sequence[Cell]],
) -> tuple[tuple[Cell, ...], ...]:
    """A row per T2I model and domain: both names, then ``figures(model, domain, cells)`` of
    its cells in ``PAPER_ORDER``."""
    return tuple(
        (
            text_cell(model),
            text_cell(name),
            *figures(model, name, [report.cell(model, name, a) or {} for a in PAPER_ORDER]),
        )
        for model in report.models
        for name in _domains(report, model, domain)
    )


def model_bias_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: mean |pair score| of age, skin and gender, and the model score
    (printed once per model; every CSV row carries it)."""
    columns = (
        Column("t2i_model", "Model", numeric=False),
        Column("domain", "Domain", numeric=False),
        *(Column(a, ATTRIBUTE_NAMES[a]) for a in PAPER_ORDER),
        Column("model_score", "Ave"),
        Column("n_pairs", "Pairs"),
    )
    rows = []
    for model in report.models:
        model_score = report.report["pair_change"][model]["model_score"]
        for index, name in enumerate(_domains(report, model, domain)):
            cells = [report.cell(model, name, a) or {} for a in PAPER_ORDER]
            rows.append(
                (
                    text_cell(model),
                    text_cell(name),
                    *(
                        score_cell(c.get("pair_mean_abs"), title=f"{c.get('n_unmeasured', 0)} unmeasured")
                        for c in cells
                    ),
                    Cell(model_score, score(model_score) if index == 0 else ""),
                    int_cell(cells[0].get("n_pairs")),
                )
            )
    return Table(
        key="bias_by_domain",
        title="Model bias per domain and attribute",
        caption=(
            "Mean |pair score| over the pairs of each domain (the paper's Table 3): age in units of "
            f"{report.thresholds.age:g} years, skin tone in units of {report.thresholds.skin:g} gray "
            "levels, gender 1 for a pair whose gender flipped. Ave: the model score, the mean of the "
            "domain x attribute figures. A pair that could not be measured scores 0 and stays "
            "counted (hover a figure for how many); \u2013 where no detector measures the attribute."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def word_mean_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: mean |word score| of each attribute (the formula the paper
    states; Table 3 itself reproduces from the pair means)."""
    columns = (
        Column("t2i_model", "Model", numeric=False),
        Column("domain", "Domain", numeric=False),
        *(Column(a, ATTRIBUTE_NAMES[a]) for a in PAPER_ORDER),
        Column("n_words", "Words"),
    )
    rows = _domain_rows(
        report,
        domain,
        lambda model, name, cells: (
            *(score_cell(c.get("word_mean_abs")) for c in cells),
            int_cell(len(report.words(model, name))),
        ),
    )
    return Table(
        key="word_mean",
        title="Mean |word score| per domain and attribute",
        caption=(
            "Section 3.5.3's model bias formula: the mean over a domain's words of |word score| "
            "(a word score is the mean signed pair score of its pairs). The authors' released code "
            "averages over pairs instead, which is what reproduces Table 3."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def unmeasured_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Per T2I model and domain: pairs, and per attribute the pairs not measurable on it."""
    columns = (
        Column("t2i_model", "Model", numeric=False),
        Column("domain", "Domain", numeric=False),
        Column("n_pairs", "Pairs"),
        *(Column(f"unmeasured_{a}", f"Unmeasured: {ATTRIBUTE_NAMES[a].lower()}") for a in PAPER_ORDER),
    )
    rows = _domain_rows(
        report,
        domain,
        lambda _model, _name, cells: (
            int_cell(cells[0].get("n_pairs")),
            *(int_cell(c.get("n_unmeasured")) for c in cells),
        ),
    )
    return Table(
        key="unmeasured",
        title="Pairs measured per domain",
        caption=(
            "Unmeasured: the pairs where a detector found no face in the edited image (or could not "
            "measure the attribute on one of the two); they score 0 and stay in every mean."
        ),
        columns=columns,
        rows=tuple(rows),
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
    columns = (
        Column("t2i_model", "Model", numeric=False),
        Column("domain", "Domain", numeric=False),
        Column("word", "Word", numeric=False),
        Column("age", "Age"),
        Column("gender", "Gender"),
        Column("gender_m2f", "Male → female"),
        Column("gender_f2m", "Female → male"),
        Column("skin", "Skin"),
        Column("n_pairs", "Pairs"),
    )
    rows = []
    for model in report.models:
        for word in report.words(model, domain):
            rows.append(
                (
                    text_cell(model),
                    text_cell(word.domain),
                    text_cell(word.word),
                    *(
                        score_cell(report.word_value(word, key))
                        for key in ("age", "gender", "gender_m2f", "gender_f2m", "skin")
                    ),
                    int_cell(word.n_pairs),
                )
            )
    return Table(
        key="word_scores",
        title="Word scores",
        caption=(
            "Per word the mean signed pair score (age: + older; skin: + lighter; gender: + male → "
            "female) and the two gender rates over its male and its female seeds."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def _accuracy_cells(accuracy: float | None, ci: Sequence[float] | None, n: int, correct: int) -> list[Cell]:
    return [
        int_cell(n),
        int_cell(correct),
        Cell(accuracy, pct(accuracy, 1) + (" %" if accuracy is not None else "")),
        Cell(
            (ci[0], ci[1]) if ci else (None, None),
            f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}] %" if ci else NO_VALUE,
        ),
    ]


def validation_table(report: PairChangeReport, domain: str | None = None) -> Table:
    """Accuracy of the automatic verdicts against the human final answers: per attribute, each
    bucket, and every attribute pooled (the paper's 90.8 %), with Wilson 95 % intervals."""
    columns = (
        Column("attribute", "Attribute", numeric=False),
        Column("bucket", "Bucket", numeric=False),
        Column("n", "Checked"),
        Column("n_correct", "Agree"),
        Column("accuracy", "Accuracy"),
        Column("ci95", "95 % CI (Wilson)", pair=True),
        Column("n_unanswered", "Awaiting an answer"),
    )
    rows = []
    for attribute in pc.ATTRIBUTES:
        result = report.validation[attribute]
        rows.append(
            (
                text_cell(attribute),
                text_cell("all"),
                *_accuracy_cells(result.accuracy, result.ci95, result.n, result.n_correct),
                int_cell(result.n_unanswered),
            )
        )
        drawn = report.drawn.get(attribute, {})
        for bucket, acc in result.buckets.items():
            waiting = (
                sum(1 for key, verdict in drawn.items() if pc.verdict_bucket(attribute, verdict) == bucket)
                - acc.n
            )
            rows.append(
                (
                    text_cell(attribute),
                    text_cell(LABEL_NAMES.get(bucket, bucket)),
                    *_accuracy_cells(acc.accuracy, acc.ci95, acc.n, acc.n_correct),
                    int_cell(waiting),
                )
            )
    overall = report.overall
    rows.append(
        (
            text_cell("all"),
            text_cell("all"),
            *_accuracy_cells(overall.accuracy, overall.ci95, overall.n, overall.n_correct),
            int_cell(sum(r.n_unanswered for r in report.validation.values())),
        )
    )
    return Table(
        key="validation",
        title="Automatic verdicts checked by people",
        caption=(
            "The pairs drawn by sample_pairs, each verdict (from the score bands: more than one "
            "threshold older / younger, lighter / darker; within a fifth of one unchanged; gender's "
            "four combinations) against the final human answer. Gender counts as agreeing only when "
            "both seed and edit genders match. The paper reports 90.8 % over all three attributes."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def confusion_table(report: PairChangeReport, attribute: str) -> Table:
    """Automatic verdict (rows) x human final answer (columns) for one attribute."""
    labels = pc.VERDICT_LABELS[attribute]
    result = report.validation[attribute]
    columns = (
        Column("automatic", "Automatic \\ human", numeric=False),
        *(Column(label, LABEL_NAMES[label]) for label in labels),
        Column("n", "Total"),
    )
    rows = []
    for auto in labels:
        counts = [result.confusion[auto][human] for human in labels]
        row = [text_cell(LABEL_NAMES[auto])]
        for human, count in zip(labels, counts, strict=True):
            row.append(Cell(count, str(count), mark="best" if human == auto and count else ""))
        row.append(int_cell(sum(counts)))
        rows.append(tuple(row))
    return Table(
        key=f"confusion_{attribute}",
        title=f"{ATTRIBUTE_NAMES[attribute]}: automatic verdict against the human answer",
        caption=(
            f"The {result.n} checked pair{'s' if result.n != 1 else ''} of the {attribute} draws; the "
            "diagonal (bold) agrees."
        ),
        columns=columns,
        rows=tuple(rows),
    )


def _confusion(attribute: str) -> Callable[[PairChangeReport, str | None], Table]:
    def build(report: PairChangeReport, domain: str | None = None) -> Table:
        return confusion_table(report, attribute)

    return build


BUILDERS: dict[str, Callable[..., Table]] = {
    "bias_by_domain": model_bias_table,
    "word_mean": word_mean_table,
    "biased_words": biased_words_table,
    "word_scores": word_scores_table,
    "unmeasured": unmeasured_table,
    "validation": validation_table,
    "confusion_age": _confusion(pc.AGE),
    "confusion_gender": _confusion(pc.GENDER),
    "confusion_skin": _confusion(pc.SKIN),
}

TABLE_KEYS = tuple(BUILDERS)


def all_tables(report: PairChangeReport, domain: str | None = None) -> list[Table]:
    """Every table in ``TABLE_KEYS`` order."""
    return [BUILDERS[key](report, domain) for key in TABLE_KEYS]
