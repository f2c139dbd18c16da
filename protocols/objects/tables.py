"""The object co-occurrence report's tables: pure functions of an ``ObjectsResult``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from metrics.coco_names import coco_class_index
from metrics.objects import ByGender, ObjectAnalysis
from protocols.objects.report import ObjectsResult
from reports.tables import (
    NO_VALUE,
    Cell,
    Column,
    Table,
    cell_field,
    int_cell,
    int_field,
    num_field,
    text_cell,
    text_field,
)

#: |adjusted residual| above this departs from independence at about the 5 % level (one cell).
RESIDUAL_MARK = 1.96
#: The mannering2023 gender words in reading order; any other word follows, sorted.
WORD_ORDER = ("man", "woman", "boy", "girl")
PAPER = {
    "tests": "the paper's χ² tests, section 4",
    "contingency": "Table 1",
    "by_gender_word": "Table 1 by gender word",
    "human_check": "human check of the detector",
}


def p_text(value: float | None) -> str:
    """A p-value as the paper prints them: four decimals, or two significant digits in
    scientific notation below 0.001 (0.000009 → 9.0e-06); the en dash when undefined."""
    if value is None:
        return NO_VALUE
    return f"{value:.4f}" if value >= 0.001 else f"{value:.1e}"


def p_cell(value: float | None) -> Cell:
    return Cell(value, p_text(value))


def residual_cell(value: float | None) -> Cell:
    """An adjusted residual, signed; a star marks |r| > 1.96."""
    if value is None:
        return Cell(None, NO_VALUE)
    star = "*" if abs(value) > RESIDUAL_MARK else ""
    return Cell(value, f"{value:+.2f}{star}")


def _total(n: ByGender[int]) -> int:
    return n.male + n.female


def _note(analysis: ObjectAnalysis) -> str:
    reason = analysis.paired_permutation.reason
    return analysis.contingency.reason or (f"paired test: {reason}" if reason else "")


def tests_table(result: ObjectsResult) -> Table:
    """Per T2I model: the χ² test and the paired permutation test of the detector's counts with
    and without ``person``, and of the confirmed boxes of the checked images."""
    person = "person counted" if result.include_person else "person left out"
    records = []
    for model, m in result.models.items():
        records.append((model, "detections, person counted", m.with_person))
        records.append((model, "detections, person left out", m.without_person))
        if m.confirmed is not None:
            records.append((model, f"confirmed boxes ({m.n_checked} checked images, {person})", m.confirmed))
    return Table.of(
        "tests",
        "Is the object distribution independent of the prompt's gender?",
        f"Pearson's χ² test of the 2 x K table of object instances (male / female prompts x classes "
        f"found at least once; detector {result.detector}@{result.version}), as in Mannering (2023); "
        "Cramér's V = √(χ²/N). The paired permutation test swaps male and female within each "
        "seed-matched pair (template, image index, adult/child) and does not assume instances are "
        "independent. A lower p means a stronger association between gender and objects.",
        (
            text_field("t2i_model", "T2I model", 0),
            text_field("counting", "Counting", 1),
            int_field("n_images_male", "Images ♂", (2, "n_images", "male")),
            int_field("n_images_female", "Images ♀", (2, "n_images", "female")),
            int_field("n_classes", "Classes", lambda r: len(r[2].contingency.classes)),
            int_field("n_instances", "Instances", lambda r: _total(r[2].contingency.n_instances)),
            num_field("chi2", "χ²", (2, "contingency", "chi2"), 2),
            int_field("dof", "dof", (2, "contingency", "dof")),
            cell_field("p_value", "p", lambda r: p_cell(r[2].contingency.p_value)),
            num_field("cramers_v", "Cramér's V", (2, "contingency", "cramers_v")),
            cell_field(
                "paired_permutation_p", "Paired perm. p", lambda r: p_cell(r[2].paired_permutation.p_value)
            ),
            int_field("n_pairs", "Pairs", (2, "paired_permutation", "n_pairs")),
            text_field("note", "Note", lambda r: _note(r[2])),
        ),
        records,
        notes=("χ² is undefined (\u2013) with fewer than two classes or a gender without any instance.",),
    )


def _union_classes(analyses: Iterable[ObjectAnalysis]) -> list[str]:
    names = {name for analysis in analyses for name in analysis.contingency.classes}
    return sorted(names, key=coco_class_index)


def contingency_table(result: ObjectsResult) -> Table:
    """Instances per class by gender with the adjusted residual of the male cell, one column
    group per T2I model, a total row under (the paper's Table 1)."""
    models = list(result.models)
    analyses = [result.analysis(model) for model in models]
    classes = _union_classes(analyses)
    columns = [Column("class", "Class", numeric=False)]
    for model in models:
        key = model.replace(" ", "_")
        columns += [
            Column(f"{key}_male", "Male"),
            Column(f"{key}_female", "Female"),
            Column(f"{key}_residual_male", "Residual"),
        ]
    rows = []
    for name in classes:
        cells: list[Cell] = [text_cell(name)]
        for analysis in analyses:
            stats = analysis.contingency.per_class.get(name)
            if stats is None:
                cells += [int_cell(0), int_cell(0), Cell(None, NO_VALUE)]
                continue
            female_residual = stats.residual.female
            title = "" if female_residual is None else f"female residual {female_residual:+.2f}"
            cells += [
                int_cell(stats.counts.male),
                int_cell(stats.counts.female),
                Cell(stats.residual.male, residual_cell(stats.residual.male).text, title=title),
            ]
        rows.append(tuple(cells))
    if classes:
        total: list[Cell] = [text_cell("total")]
        for analysis in analyses:
            n = analysis.contingency.n_instances
            total += [int_cell(n.male), int_cell(n.female), Cell(None, "")]
        rows.append(tuple(total))
    person = "person counted" if result.include_person else "person left out"
    return Table(
        key="contingency",
        title="Object instances per class by prompt gender",
        caption=(
            f"Instances found by {result.detector}@{result.version} in the images of male and female "
            f"prompts ({person}). Residual: the adjusted standardised residual of the male cell, "
            "(O - E) / √(E (1 - r/N)(1 - c/N)); the female cell's is its negative. * marks |r| > 1.96, "
            "a departure from independence at about the 5 % level taken one cell at a time."
        ),
        columns=tuple(columns),
        rows=tuple(rows),
        groups=(("", 1), *((model, 3) for model in models)),
    )


def _words(words: Iterable[str]) -> list[str]:
    seen = set(words)
    ordered = [w for w in WORD_ORDER if w in seen]
    return ordered + sorted(seen - set(ordered))


def by_gender_word_table(result: ObjectsResult) -> Table:
    """Instances per class by gender word, one column group per T2I model."""
    models = list(result.models)
    analyses = [result.analysis(model) for model in models]
    classes = _union_classes(analyses)
    words = [_words(analysis.by_gender_word) for analysis in analyses]
    columns = [Column("class", "Class", numeric=False)]
    for model, model_words in zip(models, words, strict=True):
        columns += [Column(f"{model.replace(' ', '_')}_{w}", w) for w in model_words]
    rows = []
    for name in classes:
        cells: list[Cell] = [text_cell(name)]
        for analysis, model_words in zip(analyses, words, strict=True):
            cells += [int_cell(analysis.by_gender_word[w].get(name, 0)) for w in model_words]
        rows.append(tuple(cells))
    return Table(
        key="by_gender_word",
        title="Object instances per class by gender word",
        caption="Instances per class in the images of each gender word's prompts (man, woman, boy, girl).",
        columns=tuple(columns),
        rows=tuple(rows) if any(words) else (),
        groups=(("", 1), *((model, len(w)) for model, w in zip(models, words, strict=True) if w)),
    )


def human_check_table(result: ObjectsResult) -> Table:
    """Per T2I model and class: the detector's boxes people confirmed and rejected, the objects
    they said it missed, precision and missed rate."""
    return Table.of(
        "human_check",
        "The detector as people checked it",
        "Over the images whose boxes people checked (final answers): precision = confirmed / "
        "(confirmed + rejected); missed rate = missed / (confirmed + missed), the part of the "
        "objects people saw that the detector did not find.",
        (
            text_field("t2i_model", "T2I model", 0),
            text_field("class", "Class", 1),
            int_field("n_confirmed", "Confirmed", (2, "n_confirmed")),
            int_field("n_rejected", "Rejected", (2, "n_rejected")),
            int_field("n_missed", "Missed", (2, "n_missed")),
            num_field("precision", "Precision", (2, "precision")),
            num_field("missed_rate", "Missed rate", (2, "missed_rate")),
        ),
        (
            (model, name, check)
            for model, m in result.models.items()
            for name, check in (m.human or {}).items()
        ),
    )


BUILDERS: dict[str, Callable[[ObjectsResult], Table]] = {
    "tests": tests_table,
    "contingency": contingency_table,
    "by_gender_word": by_gender_word_table,
    "human_check": human_check_table,
}
TABLE_KEYS = tuple(BUILDERS)


def class_totals(result: ObjectsResult) -> list[tuple[str, int, int]]:
    """(class, male, female) instances over the reported models, ``person`` included whatever the
    report counts, most instances first: the overview's class links."""
    totals: dict[str, list[int]] = {}
    for m in result.models.values():
        for name, stats in m.with_person.contingency.per_class.items():
            pair = totals.setdefault(name, [0, 0])
            pair[0] += stats.counts.male
            pair[1] += stats.counts.female
    ordered = sorted(totals.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), coco_class_index(kv[0])))
    return [(name, m, f) for name, (m, f) in ordered]
