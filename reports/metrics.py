"""The paper's metrics as pure functions over plain sequences (no Django).

Definitions follow Lyu et al. 2025 ("gender bias detectors"): prompt bias score (eq. 2), model
bias score (eq. 1), prompt bias score difference (eq. 3), filtering precision / recall / F1 /
filter rate (eqs. 4-5) and classification accuracy (eq. 6); plus the agreement statistics of the
labeling step (Cohen's kappa, Fleiss' kappa, Krippendorff's alpha) and seeded bootstrap
intervals.

Every function handles its empty and degenerate cases explicitly: an undefined ratio is
``None`` (never 0), and the result says how many items it was computed from.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)

MALE = "male"
FEMALE = "female"


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when the denominator is 0 (undefined, not zero)."""
    return numerator / denominator if denominator else None


# --------------------------------------------------------------------------------------------
# Agreement between annotators
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CohenKappa:
    """Cohen's kappa of two raters over the same items.

    ``kappa`` is None when there are no items or when chance agreement ``expected_agreement`` is 1
    (both raters used one and the same label for everything: kappa is 0/0). ``confusion[i][j]``
    counts items rater A labelled ``labels[i]`` and rater B labelled ``labels[j]``.
    """

    kappa: float | None
    observed_agreement: float | None
    expected_agreement: float | None
    n: int
    labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]


def _ordered_labels(values: Iterable[str], labels: Sequence[str] | None) -> tuple[str, ...]:
    """The given label order, extended by any value seen that it lacks (in sorted order)."""
    known = list(labels or [])
    extra = sorted(set(values) - set(known))
    return tuple(known + extra)


def confusion_matrix(
    rater_a: Sequence[str], rater_b: Sequence[str], labels: Sequence[str] | None = None
) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Label order and counts[i][j] of items A called labels[i] and B called labels[j]."""
    if len(rater_a) != len(rater_b):
        raise ValueError(f"Raters gave {len(rater_a)} and {len(rater_b)} labels; need one pair per item.")
    order = _ordered_labels([*rater_a, *rater_b], labels)
    index = {label: i for i, label in enumerate(order)}
    counts = [[0] * len(order) for _ in order]
    for a, b in zip(rater_a, rater_b, strict=True):
        counts[index[a]][index[b]] += 1
    return order, tuple(tuple(row) for row in counts)


def cohen_kappa(
    rater_a: Sequence[str], rater_b: Sequence[str], labels: Sequence[str] | None = None
) -> CohenKappa:
    """Cohen's kappa, observed agreement and confusion matrix of two raters (unweighted).

    Equals ``sklearn.metrics.cohen_kappa_score`` wherever that is defined.
    """
    order, confusion = confusion_matrix(rater_a, rater_b, labels)
    return cohen_kappa_from_confusion(confusion, order)


def cohen_kappa_from_confusion(confusion: Sequence[Sequence[int]], labels: Sequence[str]) -> CohenKappa:
    """Cohen's kappa from a square confusion matrix (rows rater A, columns rater B)."""
    table = tuple(tuple(int(x) for x in row) for row in confusion)
    if len(table) != len(labels) or any(len(row) != len(labels) for row in table):
        raise ValueError(f"Confusion matrix must be {len(labels)} x {len(labels)}, one row per label.")
    n = sum(map(sum, table))
    if n == 0:
        return CohenKappa(None, None, None, 0, tuple(labels), table)
    p_o = sum(table[i][i] for i in range(len(labels))) / n
    row_totals = [sum(row) for row in table]
    col_totals = [sum(col) for col in zip(*table, strict=True)]
    p_e = sum(r * c for r, c in zip(row_totals, col_totals, strict=True)) / (n * n)
    # p_e == 1 only when both raters used a single, identical label: kappa is 0/0.
    kappa = None if math.isclose(p_e, 1.0) else (p_o - p_e) / (1 - p_e)
    return CohenKappa(kappa, p_o, p_e, n, tuple(labels), table)


@dataclass(frozen=True)
class FleissKappa:
    """Fleiss' kappa over items rated by two or more raters each.

    Items may have different numbers of raters (the per-item agreement uses each item's own
    count). ``kappa`` is None with no usable item or when chance agreement is 1.
    """

    kappa: float | None
    observed_agreement: float | None
    expected_agreement: float | None
    n_items: int


def _item_counts(items: Iterable[Sequence[str | None]]) -> np.ndarray:
    """(items, categories) matrix: how many raters gave each category to each item."""
    units = [[v for v in item if v is not None] for item in items]
    categories = {c: i for i, c in enumerate(sorted({v for unit in units for v in unit}))}
    counts = np.zeros((len(units), max(len(categories), 1)), dtype=np.int64)
    for row, unit in enumerate(units):
        for value in unit:
            counts[row, categories[value]] += 1
    return counts


def fleiss_kappa(items: Iterable[Sequence[str]]) -> FleissKappa:
    """Fleiss' kappa of items, each given as the labels its raters chose (items with < 2 skipped)."""
    return fleiss_kappa_from_counts(_item_counts(items))


def fleiss_kappa_from_counts(counts: np.ndarray) -> FleissKappa:
    """Fleiss' kappa from an (items, categories) matrix of rater counts; rows with < 2 skipped."""
    counts = np.asarray(counts, dtype=np.int64)
    raters = counts.sum(axis=1) if counts.size else np.zeros(0, dtype=np.int64)
    keep = raters >= 2
    counts, raters = counts[keep], raters[keep]
    if len(raters) == 0:
        return FleissKappa(None, None, None, 0)
    per_item = ((counts * counts).sum(axis=1) - raters) / (raters * (raters - 1))
    p_bar = float(per_item.mean())
    p_e = float(((counts.sum(axis=0) / raters.sum()) ** 2).sum())
    kappa = None if math.isclose(p_e, 1.0) else (p_bar - p_e) / (1 - p_e)
    return FleissKappa(kappa, p_bar, p_e, len(raters))


@dataclass(frozen=True)
class KrippendorffAlpha:
    """Krippendorff's alpha for nominal data.

    ``n_units`` counts units with at least two values (the only ones that carry information),
    ``n_values`` the values in them. ``alpha`` is None when there is no pairable value or when
    all values are the same (expected disagreement 0).
    """

    alpha: float | None
    n_units: int
    n_values: int


def krippendorff_alpha_nominal(units: Iterable[Sequence[str | None]]) -> KrippendorffAlpha:
    """Nominal Krippendorff's alpha; each unit lists its coders' values, None where missing."""
    return krippendorff_alpha_from_counts(_item_counts(units))


def krippendorff_alpha_from_counts(counts: np.ndarray) -> KrippendorffAlpha:
    """Nominal alpha from a (units, values) matrix of how many coders gave each value.

    With m_u values in unit u, the coincidences of different values sum to
    D_o = sum_u (m_u^2 - sum_c n_uc^2) / (m_u - 1); with n_c the total of value c and n of all,
    alpha = 1 - (n - 1) * D_o / (n^2 - sum_c n_c^2). Units with fewer than 2 values are dropped.
    """
    counts = np.asarray(counts, dtype=np.int64)
    values = counts.sum(axis=1) if counts.size else np.zeros(0, dtype=np.int64)
    keep = values >= 2
    counts, values = counts[keep], values[keep]
    if len(values) == 0:
        return KrippendorffAlpha(None, 0, 0)
    observed = float(((values * values - (counts * counts).sum(axis=1)) / (values - 1)).sum())
    n = int(values.sum())
    totals = counts.sum(axis=0)
    expected = float(n * n - (totals * totals).sum())
    alpha = None if expected == 0 else 1 - (n - 1) * observed / expected
    return KrippendorffAlpha(alpha, len(values), n)


# --------------------------------------------------------------------------------------------
# Bias scores (eqs. 1-3)
# --------------------------------------------------------------------------------------------


def prompt_bias_score(n_male: int, n_female: int) -> float | None:
    """Eq. 2: (n_male - n_female) / n_clear, with clear = male + female. None without clear images."""
    return ratio(n_male - n_female, n_male + n_female)


@dataclass(frozen=True)
class ModelBiasScore:
    """Eq. 1: mean over prompts of |prompt bias score|; prompts without a score are listed in
    ``unscored``, not averaged as 0. ``value`` is None when no prompt has a score."""

    value: float | None
    n_scored: int
    unscored: tuple[Hashable, ...]


def model_bias_score(prompt_scores: Mapping[K, float | None]) -> ModelBiasScore:
    """Eq. 1 from per-prompt bias scores (|n_m - n_f| / (n_m + n_f) = |prompt bias score|)."""
    scored = [abs(s) for s in prompt_scores.values() if s is not None]
    unscored = tuple(k for k, s in prompt_scores.items() if s is None)
    return ModelBiasScore(ratio(sum(scored), len(scored)), len(scored), unscored)


def category_bias_scores(rows: Iterable[tuple[str, K, float | None]]) -> dict[str, ModelBiasScore]:
    """Eq. 1 per category from (category, prompt key, prompt bias score) rows; sorted by category."""
    by_category: defaultdict[str, dict[K, float | None]] = defaultdict(dict)
    for category, key, score in rows:
        by_category[category][key] = score
    return {c: model_bias_score(by_category[c]) for c in sorted(by_category)}


def pct_difference(detector: float | None, human: float | None) -> float | None:
    """Signed difference of a detector's score from the human one, in percent of the human score:
    (det - human) / human x 100. Positive = the detector overestimates. None when undefined."""
    if detector is None or human is None or human == 0:
        return None
    return (detector - human) / human * 100


@dataclass(frozen=True)
class PromptScoreDifference:
    """Eq. 3: mean |PBS_detector - PBS_human| over the ``n_prompts`` prompts both scored."""

    value: float | None
    n_prompts: int


def prompt_bias_score_difference(
    detector: Mapping[K, float | None], human: Mapping[K, float | None]
) -> PromptScoreDifference:
    """Eq. 3 over the prompts that have a score from both sides."""
    diffs = [
        abs(score - human[key])
        for key, score in detector.items()
        if score is not None and human.get(key) is not None
    ]
    return PromptScoreDifference(ratio(sum(diffs), len(diffs)), len(diffs))


# --------------------------------------------------------------------------------------------
# Filtering and classification (eqs. 4-6)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filtering:
    """Filtering as a binary problem: positive = clear image (human male/female); the detector
    keeps an image when its verdict is male or female. ``filter_rate`` = TN / (TN + FP), the
    share of not-clear images the detector filtered (None without any). Undefined ratios are
    None."""

    precision: float | None
    recall: float | None
    f1: float | None
    filter_rate: float | None
    tp: int
    fp: int
    fn: int
    tn: int


def filtering_metrics(*, tp: int, fp: int, fn: int, tn: int) -> Filtering:
    """Eqs. 4-5 from the raw confusion counts."""
    precision = ratio(tp, tp + fp)
    recall = ratio(tp, tp + fn)
    f1 = None
    if precision is not None and recall is not None:
        f1 = ratio(2 * precision * recall, precision + recall)
    return Filtering(precision, recall, f1, ratio(tn, tn + fp), tp, fp, fn, tn)


@dataclass(frozen=True)
class Accuracy:
    """Eq. 6 on images clear to humans and kept by the detector: share classified correctly,
    for human-male images, human-female images, and both together."""

    male: float | None
    female: float | None
    overall: float | None
    n_male: int
    n_female: int


def classification_accuracy(
    *, male_correct: int, male_total: int, female_correct: int, female_total: int
) -> Accuracy:
    """Eq. 6: (TP + TN) / all, with male as positive, over clear-and-kept images."""
    if male_correct > male_total or female_correct > female_total:
        raise ValueError("More correct classifications than classified images.")
    return Accuracy(
        ratio(male_correct, male_total),
        ratio(female_correct, female_total),
        ratio(male_correct + female_correct, male_total + female_total),
        male_total,
        female_total,
    )


def label_shares(counts: Mapping[str, int], labels: Sequence[str]) -> dict[str, float | None]:
    """Share of each label in ``labels`` among all counted images (the paper's table 5)."""
    total = sum(counts.values())
    return {label: ratio(counts.get(label, 0), total) for label in labels}


@dataclass(frozen=True)
class Histogram:
    """Counts of prompt bias scores in bins [edges[i], edges[i+1]) (the last bin includes 1)."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    n_unscored: int


def score_histogram(scores: Iterable[float | None], bins: int = 10) -> Histogram:
    """Histogram of prompt bias scores over [-1, 1] (the paper's figure 3); None counted apart."""
    values = list(scores)
    scored = np.array([s for s in values if s is not None], dtype=float)
    counts, edges = np.histogram(scored, bins=bins, range=(-1.0, 1.0))
    return Histogram(
        tuple(round(float(e), 10) for e in edges),
        tuple(int(c) for c in counts),
        sum(1 for s in values if s is None),
    )


# --------------------------------------------------------------------------------------------
# Bootstrap intervals (images resampled within prompts)
# --------------------------------------------------------------------------------------------

# A seed for numpy's default_rng: an int, or a sequence of ints (e.g. a base seed plus hashes of
# the model and detector names, so each interval has its own stream).
Seed = int | Sequence[int]

# Cell order of a prompt's joint table: human class (rows) x detector verdict (columns).
CLASSES = ("male", "female", "rest")  # rest = human: not clear / detector: filtered


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]


def _resample_within_prompts(counts: np.ndarray, n_resamples: int, seed: Seed) -> np.ndarray:
    """Draw ``n_resamples`` bootstrap replicates of each prompt's images: for a prompt with n
    images in cells with counts c, a replicate is Multinomial(n, c / n). Returns an int array
    (cells, prompts, n_resamples) — replicates last, so every step below works on contiguous
    rows.

    Drawn as a chain of binomials over the cells, only for the prompts whose cell is uncertain
    (0 < p < 1): most cells of real tables are empty, and a prompt's last non-empty cell takes
    what is left, which makes this several times faster than ``Generator.multinomial``.
    """
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, dtype=np.int64)
    n_prompts, n_cells = counts.shape
    out = np.zeros((n_cells, n_prompts, n_resamples), dtype=np.int64)
    remaining = np.repeat(counts.sum(axis=1)[:, None], n_resamples, axis=1)
    left = counts.sum(axis=1)
    for k in range(n_cells):
        column = counts[:, k]
        certain = (column > 0) & (column == left)  # the prompt's last non-empty cell
        if certain.any():
            out[k, certain] = remaining[certain]
            remaining[certain] = 0
        random = (column > 0) & (column < left)
        if random.any():
            drawn = rng.binomial(remaining[random], (column[random] / left[random])[:, None])
            out[k, random] = drawn
            remaining[random] -= drawn
        left = left - column
    return out


def _model_scores(n_male: np.ndarray, n_female: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From (prompts, replicates) counts: prompt scores (NaN = no clear image) and the model bias
    score of each replicate (NaN = no prompt with a clear image)."""
    clear = n_male + n_female
    with np.errstate(divide="ignore", invalid="ignore"):
        prompt = (n_male - n_female) / clear  # NaN where clear == 0
    scored = clear > 0
    n_scored = scored.sum(axis=0)
    total = np.abs(np.where(scored, prompt, 0.0)).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        model = np.where(n_scored > 0, total / np.maximum(n_scored, 1), np.nan)
    return prompt, model


def _percentile_interval(values: np.ndarray, level: float) -> Interval | None:
    """Percentile interval of the defined (non-NaN) replicates; None when none is defined."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return Interval(float(lo), float(hi))


def bootstrap_model_bias(
    counts: Sequence[Sequence[int]], *, n_resamples: int = 1000, seed: Seed = 0, level: float = 0.95
) -> Interval | None:
    """Percentile interval of the model bias score, resampling images within prompts.

    ``counts`` has one row per prompt: (n_male, n_female, n_not_clear). Replicates in which no
    prompt has a clear image are left out; None when no replicate has a score.
    """
    table = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    if table.shape[0] == 0 or n_resamples <= 0:
        return None
    draws = _resample_within_prompts(table, n_resamples, seed)
    _, model = _model_scores(draws[0], draws[1])
    return _percentile_interval(model, level)


@dataclass(frozen=True)
class PairedBootstrap:
    """Intervals from resampling the same images for human labels and detector verdicts."""

    human: Interval | None
    detector: Interval | None
    pct_diff: Interval | None
    prompt_bias_score_difference: Interval | None


def bootstrap_detector_vs_human(
    joint: Sequence[Sequence[Sequence[int]]] | np.ndarray,
    *,
    n_resamples: int = 1000,
    seed: Seed = 0,
    level: float = 0.95,
) -> PairedBootstrap:
    """Paired bootstrap of a detector against the human labels on the same images.

    ``joint[p][h][d]`` counts prompt p's images with human class h and detector verdict d, both
    in ``CLASSES`` order (male, female, rest). Each replicate resamples the images of every
    prompt together with both their labels, so the human and detector scores move together.
    """
    table = np.asarray(joint, dtype=np.int64).reshape(-1, 9)
    if table.shape[0] == 0 or n_resamples <= 0:
        return PairedBootstrap(None, None, None, None)
    draws = _resample_within_prompts(table, n_resamples, seed).reshape(3, 3, -1, n_resamples)
    # Only the clear counts enter the scores: human male / female = rows 0 / 1 summed over the
    # detector's verdicts, detector male / female = columns 0 / 1 summed over the human labels.
    human_prompt, human_model = _model_scores(draws[0].sum(axis=0), draws[1].sum(axis=0))
    det_prompt, det_model = _model_scores(draws[:, 0].sum(axis=0), draws[:, 1].sum(axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(human_model > 0, (det_model - human_model) / human_model * 100, np.nan)
        both = ~np.isnan(human_prompt) & ~np.isnan(det_prompt)
        n_both = both.sum(axis=0)
        diff_total = np.where(both, np.abs(det_prompt - human_prompt), 0.0).sum(axis=0)
        pbsd = np.where(n_both > 0, diff_total / n_both, np.nan)
    return PairedBootstrap(
        _percentile_interval(human_model, level),
        _percentile_interval(det_model, level),
        _percentile_interval(pct, level),
        _percentile_interval(pbsd, level),
    )
