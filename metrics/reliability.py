"""Annotator reliability: gold accuracy with its Wilson interval and the gold rule's flag.

Pure: plain counts in, a frozen dataclass out. The interval is ``metrics.questions``'
Wilson score interval; with no gold answer yet nothing is known (accuracy None, interval 0..1).
"""

from __future__ import annotations

from dataclasses import dataclass

from metrics.questions import wilson_interval


@dataclass(frozen=True)
class GoldAccuracy:
    """``correct`` of ``n`` gold answers right; ``flagged`` when a rule is set, the annotator
    gave at least ``min_gold`` gold answers and their accuracy is below ``min_accuracy``."""

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
