"""Answer shares per group, their Wilson intervals and χ² test: the ``questions`` protocol's statistics."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metrics import agreement

#: The 97.5 % quantile of the standard normal distribution (a two-sided 95 % interval).
Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n``, clipped to [0, 1]; (0, 1) when n is 0."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n ({n}), got {successes!r}")
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class IndependenceTest:
    """Pearson's χ² test of independence of a groups x answers table, and Cramér's V."""

    chi2: float
    dof: int
    p_value: float
    cramers_v: float
    n: int


def independence_test(table: Sequence[Sequence[int]]) -> IndependenceTest:
    """χ² test of a groups x answers table, empty rows and columns dropped (χ² 0, p 1 if nothing to test)."""
    rows = [list(map(int, row)) for row in table if sum(row) > 0]
    if not rows:
        return IndependenceTest(0.0, 0, 1.0, 0.0, 0)
    columns = [j for j in range(len(rows[0])) if any(row[j] for row in rows)]
    observed = [[row[j] for j in columns] for row in rows]
    n = sum(sum(row) for row in observed)
    r, c = len(observed), len(columns)
    if r < 2 or c < 2:
        return IndependenceTest(0.0, 0, 1.0, 0.0, n)
    row_totals = [sum(row) for row in observed]
    column_totals = [sum(row[j] for row in observed) for j in range(c)]
    chi2 = 0.0
    for i in range(r):
        for j in range(c):
            expected = row_totals[i] * column_totals[j] / n
            chi2 += (observed[i][j] - expected) ** 2 / expected
    dof = (r - 1) * (c - 1)
    from scipy.stats import chi2 as chi2_distribution  # here: scipy.stats is slow to import

    p_value = float(chi2_distribution.sf(chi2, dof))
    cramers_v = math.sqrt(chi2 / (n * (min(r, c) - 1)))
    return IndependenceTest(chi2=chi2, dof=dof, p_value=p_value, cramers_v=cramers_v, n=n)


@dataclass(frozen=True)
class GroupShares:
    """One group's answers: items, and each answer's count, share and Wilson interval."""

    n: int
    counts: Mapping[str, int]
    shares: Mapping[str, float]
    ci95: Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class SharesComparison:
    """Answer shares per group, their χ² test and the largest gap between groups per answer."""

    groups: Mapping[str, GroupShares]
    test: IndependenceTest
    max_gap: Mapping[str, float]


def group_shares(answers: Sequence[str], values: Sequence[str]) -> GroupShares:
    """Shares of each of ``values`` among ``answers``, with Wilson intervals."""
    counts = Counter(answers)
    unknown = sorted(set(counts) - set(values))
    if unknown:
        raise ValueError(f"answer {unknown[0]!r} is not one of {', '.join(values)}")
    n = len(answers)
    return GroupShares(
        n=n,
        counts={v: counts[v] for v in values},
        shares={v: (counts[v] / n if n else 0.0) for v in values},
        ci95={v: wilson_interval(counts[v], n) for v in values},
    )


def answer_shares(by_group: Mapping[str, Sequence[str]], values: Sequence[str]) -> SharesComparison:
    """Per group the answer shares, the χ² test and the largest gap per answer."""
    groups = {g: group_shares(list(a), values) for g, a in sorted(by_group.items()) if a}
    table = [[shares.counts[v] for v in values] for shares in groups.values()]
    max_gap = {
        v: (max(s.shares[v] for s in groups.values()) - min(s.shares[v] for s in groups.values()))
        if groups
        else 0.0
        for v in values
    }
    return SharesComparison(groups=groups, test=independence_test(table), max_gap=max_gap)


def cohen_kappa(truth: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Cohen's kappa of a detector's answers against the final labels; None where undefined."""
    return agreement.cohen_kappa(truth, predicted).kappa


def accuracy(truth: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Share of items where both agree; None with no item."""
    if not truth:
        return None
    return sum(a == b for a, b in zip(truth, predicted, strict=True)) / len(truth)


def max_gap_error(judge: Mapping[str, float], people: Mapping[str, float]) -> dict[str, float]:
    """Per answer, the judge's largest gap between groups minus the people's."""
    return {answer: judge[answer] - people[answer] for answer in people if answer in judge}
