"""The stratified and active designs of the few-label estimates (docs/explanation/estimator.md)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from metrics.ppi_design import eligible_budget


def inclusion_probabilities_stratified(
    strata: Sequence[Hashable],
    budget: float,
    *,
    spread: Mapping[Hashable, float] | None = None,
    eligible: Sequence[bool] | np.ndarray | None = None,
    floor: float = 0.25,
) -> np.ndarray:
    """π per item under Neyman allocation of ``budget`` over ``strata`` (``spread``: S_h, default 1)."""
    n = len(strata)
    mask, budget = eligible_budget(n, eligible, budget)
    if not 0.0 <= floor <= 1.0:
        raise ValueError("floor: must lie in [0, 1].")
    pi = np.zeros(n)
    n_eligible = int(mask.sum())
    if budget == 0:
        return pi
    keys = sorted({strata[int(i)] for i in np.flatnonzero(mask)}, key=repr)
    index = {key: j for j, key in enumerate(keys)}
    codes = np.array([index[strata[i]] if mask[i] else -1 for i in range(n)])
    sizes = np.bincount(codes[mask], minlength=len(keys)).astype(float)
    s = np.array([max(float((spread or {}).get(key) or 0.0), 0.0) if spread else 1.0 for key in keys])
    if not np.any(s > 0):
        s = np.ones(len(keys))
    uniform = budget / n_eligible
    lo = floor * uniform

    # Neyman: π_h = c S_h; Σ N_h clip(c S_h, lo, 1) is monotone in c, so bisect for the budget.
    def total(c: float) -> float:
        return float(sizes @ np.clip(c * s, lo, 1.0))

    low, high = 0.0, 1.0 / float(s[s > 0].min())
    for _ in range(200):
        mid = (low + high) / 2
        if total(mid) < budget:
            low = mid
        else:
            high = mid
    p = np.clip(high * s, lo, 1.0)
    if total(high) < budget - 1e-9:
        # Every stratum with a spread is taken whole: the rest of the budget goes to those without.
        capped = p.copy()
        t_low, t_high = lo, 1.0
        for _ in range(200):
            t = (t_low + t_high) / 2
            if float(sizes @ np.maximum(capped, t)) < budget:
                t_low = t
            else:
                t_high = t
        p = np.maximum(capped, t_high)
    pi[mask] = p[codes[mask]]
    return pi


def residual_spread(
    strata_outputs: Sequence[Hashable],
    residual_sq: Sequence[float],
    weights: Sequence[float],
    prior: float = 0.5,
) -> dict[Hashable, float]:
    """S per detector output from earlier rounds' labelled items, one pseudo-item of ``prior`` added."""
    sums: dict[Hashable, list[float]] = {}
    for key, r2, w in zip(strata_outputs, residual_sq, weights, strict=True):
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += float(w) * float(r2)
        acc[1] += float(w)
    return {key: float(np.sqrt((total + prior) / (weight + 1.0))) for key, (total, weight) in sums.items()}


def inclusion_probabilities_active(
    outputs: Sequence[Hashable],
    budget: float,
    *,
    spread: Mapping[Hashable, float],
    eligible: Sequence[bool] | np.ndarray | None = None,
    mix: float = 0.2,
    floor: float = 0.25,
) -> np.ndarray:
    """π per item of the active design: ∝ S of the item's detector output, mixed with uniform."""
    if not 0.0 <= mix <= 1.0:
        raise ValueError("mix: must lie in [0, 1].")
    keys = list(outputs)
    by_error = inclusion_probabilities_stratified(keys, budget, spread=spread, eligible=eligible, floor=floor)
    uniform = inclusion_probabilities_stratified(keys, budget, eligible=eligible)
    return (1.0 - mix) * by_error + mix * uniform
