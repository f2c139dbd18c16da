"""Annotator reliability: gold accuracy with its Wilson interval and flag, the reliability flag,
and pairwise Cohen's kappa."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics.agreement import CohenKappa, cohen_kappa
from metrics.questions import wilson_interval


@dataclass(frozen=True)
class GoldAccuracy:
    """``correct`` of ``n`` gold answers, ``flagged`` by the gold rule."""

    n: int
    correct: int
    accuracy: float | None
    low: float
    high: float
    flagged: bool


def gold_accuracy(correct: int, n: int, *, min_accuracy: float | None, min_gold: int) -> GoldAccuracy:
    low, high = wilson_interval(correct, n)
    accuracy = correct / n if n else None
    flagged = min_accuracy is not None and accuracy is not None and n >= min_gold and accuracy < min_accuracy
    return GoldAccuracy(n=n, correct=correct, accuracy=accuracy, low=low, high=high, flagged=flagged)


def reliability_flagged(share: float | None, n: int, *, min_accuracy: float | None, min_n: int) -> bool:
    """Whether an accuracy estimated as ``share`` over ``n`` answers is credibly below
    ``min_accuracy``: at least ``min_n`` answers and the upper end of the 95 % Wilson interval
    of ``share`` x ``n`` right out of ``n`` (rounded) below the threshold."""
    if min_accuracy is None or share is None or n < max(min_n, 1):
        return False
    return wilson_interval(round(share * n), n)[1] < min_accuracy


def pairwise_kappas(answers: Mapping[str, Mapping[Any, str]]) -> dict[tuple[str, str], CohenKappa]:
    """Cohen's kappa of every pair of raters (a < b) over the units both answered."""
    raters = sorted(answers)
    kappas: dict[tuple[str, str], CohenKappa] = {}
    for i, a in enumerate(raters):
        for b in raters[i + 1 :]:
            shared = sorted(answers[a].keys() & answers[b].keys(), key=repr)
            if shared:
                kappas[(a, b)] = cohen_kappa([answers[a][u] for u in shared], [answers[b][u] for u in shared])
    return kappas


def mean_kappa(kappas: Mapping[tuple[str, str], CohenKappa], rater: str) -> float | None:
    """The mean of the rater's defined kappas with the others (None: none defined)."""
    values = [k.kappa for pair, k in kappas.items() if rater in pair and k.kappa is not None]
    return sum(values) / len(values) if values else None
