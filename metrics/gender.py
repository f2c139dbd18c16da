"""The gender-bias metrics of Lyu et al. 2025 (eqs. 1-6, table 5, figure 3) and bootstrap
intervals resampling images within prompts; answers folded into three classes (first clear
value, second, rest): docs/explanation/metrics.md."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from metrics.ppi_shares import Seed, mean_abs, ratio_scores

K = TypeVar("K", bound=Hashable)

# Class order of every joint table: the first and second clear value, then everything else.
FIRST, SECOND, REST = 0, 1, 2
N_CLASSES = 3


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when the denominator is 0 (undefined, not zero)."""
    return numerator / denominator if denominator else None


def check_clear_values(clear: Sequence[str]) -> tuple[str, str]:
    """The two clear values as a pair; ValueError unless there are exactly two distinct ones."""
    values = tuple(clear)
    if len(values) != 2 or values[0] == values[1]:
        raise ValueError(
            f"A gender bias score needs exactly two clear answers, got {list(values)}: mark two "
            "choices of the question as clear."
        )
    return values[0], values[1]


def class_index(value: str | None, clear: Sequence[str]) -> int:
    """FIRST or SECOND for the first or second of the ``clear`` values, else REST."""
    if value is not None and value in clear[:2]:
        return FIRST if value == clear[0] else SECOND
    return REST


# --- Bias scores (eqs. 1-3) -----------------------------------------------------------------------


def prompt_bias_score(n_male: float, n_female: float) -> float | None:
    """Eq. 2: (n_male - n_female) / n_clear; None without clear images."""
    return ratio(n_male - n_female, n_male + n_female)


@dataclass(frozen=True)
class ModelBiasScore:
    """Eq. 1: mean over prompts of |prompt bias score|, unscored prompts listed apart."""

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
    """(det - human) / human x 100: a detector's signed difference from the human score; None if undefined."""
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
        abs(score - other)
        for key, score in detector.items()
        if score is not None and (other := human.get(key)) is not None
    ]
    return PromptScoreDifference(ratio(sum(diffs), len(diffs)), len(diffs))


# --- Filtering and classification (eqs. 4-6) ------------------------------------------------------


@dataclass(frozen=True)
class Filtering:
    """Filtering as a binary problem (positive: clear to humans; kept: a clear verdict)."""

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
    """Eq. 6 on images clear to humans and kept by the detector: for male, female and both."""

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


def _joint(table: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    t = np.asarray(table, dtype=np.int64)
    if t.shape != (N_CLASSES, N_CLASSES):
        raise ValueError(f"A joint table is 3 x 3 (human class x detector class), got shape {t.shape}.")
    return t


def filtering_from_joint(table: Sequence[Sequence[int]] | np.ndarray) -> Filtering:
    """Eqs. 4-5 from a 3 x 3 joint table [human class][detector class]."""
    t = _joint(table)
    return filtering_metrics(
        tp=int(t[:REST, :REST].sum()),
        fp=int(t[REST, :REST].sum()),
        fn=int(t[:REST, REST].sum()),
        tn=int(t[REST, REST]),
    )


def accuracy_from_joint(table: Sequence[Sequence[int]] | np.ndarray) -> Accuracy:
    """Eq. 6 from a 3 x 3 joint table: on images clear to humans and kept by the detector."""
    t = _joint(table)
    return classification_accuracy(
        male_correct=int(t[FIRST, FIRST]),
        male_total=int(t[FIRST, :REST].sum()),
        female_correct=int(t[SECOND, SECOND]),
        female_total=int(t[SECOND, :REST].sum()),
    )


def label_shares(counts: Mapping[str, int], labels: Sequence[str]) -> dict[str, float | None]:
    """Share of each label in ``labels`` among all counted images (the paper's table 5)."""
    total = sum(counts.values())
    return {label: ratio(counts.get(label, 0), total) for label in labels}


# --- Bootstrap intervals (images resampled within prompts) ----------------------------------------


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]


def _resample_within_prompts(counts: np.ndarray, n_resamples: int, seed: Seed) -> np.ndarray:
    """Bootstrap replicates of each prompt's images as (cells, prompts, n_resamples) counts."""
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
    """Percentile interval of the model bias score from (n_male, n_female, n_not_clear) per prompt."""
    table = np.asarray(counts, dtype=np.int64).reshape(-1, 3)
    if table.shape[0] == 0 or n_resamples <= 0:
        return None
    draws = _resample_within_prompts(table, n_resamples, seed)
    return _percentile_interval(mean_abs(ratio_scores(draws[0], draws[1]).T), level)


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
    """Paired bootstrap of a detector against the human labels of the same images (``joint[p][h][d]``)."""
    table = np.asarray(joint, dtype=np.int64).reshape(-1, 9)
    if table.shape[0] == 0 or n_resamples <= 0:
        return PairedBootstrap(None, None, None, None)
    draws = _resample_within_prompts(table, n_resamples, seed).reshape(3, 3, -1, n_resamples)
    # Only the clear counts enter the scores: human rows 0 / 1 and detector columns 0 / 1.
    # (prompts, replicates) prompt scores (NaN: no clear image) and each replicate's model score.
    human_prompt = ratio_scores(draws[0].sum(axis=0), draws[1].sum(axis=0))
    det_prompt = ratio_scores(draws[:, 0].sum(axis=0), draws[:, 1].sum(axis=0))
    human_model, det_model = mean_abs(human_prompt.T), mean_abs(det_prompt.T)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(human_model > 0, (det_model - human_model) / human_model * 100, np.nan)
    pbsd = mean_abs((det_prompt - human_prompt).T)
    return PairedBootstrap(
        _percentile_interval(human_model, level),
        _percentile_interval(det_model, level),
        _percentile_interval(pct, level),
        _percentile_interval(pbsd, level),
    )


# --- A detector against the human labels of the same images ---------------------------------------


@dataclass(frozen=True)
class DetectorVsHuman:
    """One detector on one T2I model against the human labels of the same images, with intervals."""

    model_bias_score: float | None
    human_model_bias_score: float | None
    pct_diff: float | None
    prompt_bias_score_difference: float | None
    pct_diff_ci: Interval | None
    model_bias_score_ci: Interval | None
    prompt_bias_score_difference_ci: Interval | None
    n_images: int


def detector_vs_human(
    joint: Mapping[K, Sequence[Sequence[int]] | np.ndarray],
    *,
    n_resamples: int = 1000,
    seed: Seed = 0,
    level: float = 0.95,
) -> DetectorVsHuman:
    """Eqs. 1-3 for a detector against humans from per-prompt 3 x 3 joint tables, with a paired bootstrap."""
    keys = list(joint)
    tables = np.array([_joint(joint[k]) for k in keys], dtype=np.int64).reshape(-1, 3, 3)
    human_counts = tables[:, :REST, :].sum(axis=2).tolist()
    detector_counts = tables[:, :, :REST].sum(axis=1).tolist()
    human = {k: prompt_bias_score(m, f) for k, (m, f) in zip(keys, human_counts, strict=True)}
    detected = {k: prompt_bias_score(m, f) for k, (m, f) in zip(keys, detector_counts, strict=True)}
    human_score = model_bias_score(human).value
    detector_score = model_bias_score(detected).value
    pct = pct_difference(detector_score, human_score)
    difference = prompt_bias_score_difference(detected, human).value
    paired = bootstrap_detector_vs_human(tables, n_resamples=n_resamples, seed=seed, level=level)
    return DetectorVsHuman(
        model_bias_score=detector_score,
        human_model_bias_score=human_score,
        pct_diff=pct,
        prompt_bias_score_difference=difference,
        pct_diff_ci=paired.pct_diff if pct is not None else None,
        model_bias_score_ci=paired.detector if detector_score is not None else None,
        prompt_bias_score_difference_ci=paired.prompt_bias_score_difference
        if difference is not None
        else None,
        n_images=int(tables.sum()),
    )
