"""How well a judge's probabilities match people's answers: Brier score, ECE and reliability bins."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Bins of the expected calibration error and of the reliability diagram.
BINS = 10


def _normalised(probabilities: Mapping[str, float], values: Sequence[str]) -> list[float]:
    raw = [float(probabilities.get(v, 0.0)) for v in values]
    if any(p < 0 or math.isnan(p) for p in raw):
        raise ValueError(f"probabilities must be non-negative numbers, got {dict(probabilities)}")
    total = sum(raw)
    if total <= 0:
        raise ValueError(f"probabilities of {', '.join(values)} sum to 0")
    return [p / total for p in raw]


def _check(probabilities: Sequence[Mapping[str, float]], truth: Sequence[str], values: Sequence[str]) -> None:
    if len(probabilities) != len(truth):
        raise ValueError(f"{len(probabilities)} probability rows for {len(truth)} answers; need one per item")
    unknown = sorted(set(truth) - set(values))
    if unknown:
        raise ValueError(f"answer {unknown[0]!r} is not one of {', '.join(values)}")


def brier_score(
    probabilities: Sequence[Mapping[str, float]], truth: Sequence[str], values: Sequence[str]
) -> float | None:
    """The Brier score of per-item answer probabilities (halved for two answers); None with no item."""
    _check(probabilities, truth, values)
    if not truth:
        return None
    total = 0.0
    for row, answer in zip(probabilities, truth, strict=True):
        p = _normalised(row, values)
        total += sum((p_v - (1.0 if v == answer else 0.0)) ** 2 for v, p_v in zip(values, p, strict=True))
    score = total / len(truth)
    return score / 2 if len(values) == 2 else score


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of confidence (lo, hi]: its items, their mean confidence and accuracy."""

    lo: float
    hi: float
    n: int
    confidence: float | None
    accuracy: float | None


def top_label(probabilities: Mapping[str, float], values: Sequence[str]) -> tuple[str, float]:
    """The most likely answer (the first of ``values`` on a tie) and its probability."""
    p = _normalised(probabilities, values)
    best = max(range(len(values)), key=lambda i: (p[i], -i))
    return values[best], p[best]


def reliability_bins(
    probabilities: Sequence[Mapping[str, float]],
    truth: Sequence[str],
    values: Sequence[str],
    bins: int = BINS,
) -> list[ReliabilityBin]:
    """The reliability diagram: ``bins`` equal-width bins of top-label confidence."""
    _check(probabilities, truth, values)
    if bins < 1:
        raise ValueError("bins must be at least 1")
    counts = [0] * bins
    confidence = [0.0] * bins
    correct = [0] * bins
    for row, answer in zip(probabilities, truth, strict=True):
        best, p = top_label(row, values)
        # Rounded first: .7 * 10 is 7.000000000000001 in floating point, and .7 belongs in (.6, .7].
        index = min(bins - 1, max(0, math.ceil(round(p * bins, 9)) - 1))
        counts[index] += 1
        confidence[index] += p
        correct[index] += best == answer
    return [
        ReliabilityBin(
            lo=b / bins,
            hi=(b + 1) / bins,
            n=counts[b],
            confidence=confidence[b] / counts[b] if counts[b] else None,
            accuracy=correct[b] / counts[b] if counts[b] else None,
        )
        for b in range(bins)
    ]


def expected_calibration_error(
    probabilities: Sequence[Mapping[str, float]],
    truth: Sequence[str],
    values: Sequence[str],
    bins: int = BINS,
) -> float | None:
    """Top-label expected calibration error over ``bins`` equal-width bins; None with no item."""
    table = reliability_bins(probabilities, truth, values, bins)
    n = sum(b.n for b in table)
    if n == 0:
        return None
    return sum(
        b.n / n * abs(b.accuracy - b.confidence)
        for b in table
        if b.n and b.accuracy is not None and b.confidence is not None
    )


@dataclass(frozen=True)
class Calibration:
    """A judge's probabilities against people on one question: n, Brier score, ECE and bins."""

    n: int
    brier: float | None
    ece: float | None
    bins: tuple[ReliabilityBin, ...]


def calibration(
    probabilities: Sequence[Mapping[str, float]],
    truth: Sequence[str],
    values: Sequence[str],
    bins: int = BINS,
) -> Calibration:
    """Brier score, ECE and reliability bins of the same items at once."""
    table = reliability_bins(probabilities, truth, values, bins)
    return Calibration(
        n=len(truth),
        brier=brier_score(probabilities, truth, values),
        ece=expected_calibration_error(probabilities, truth, values, bins),
        bins=tuple(table),
    )
