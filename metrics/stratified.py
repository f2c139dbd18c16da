"""The stratified design of the few-label estimates: strata, Neyman allocation, π.

Strata are prompt x detector output (a prompt's images the detector calls male, female,
filtered...). Neyman allocation gives stratum h an expected n_h ∝ N_h S_h labels, where N_h
counts its eligible items and S_h is the spread of the detector's error there (the standard
deviation of Y - f): strata where the detector errs more get more labels, strata where it is
right every time fewer. Before any label S_h is unknown and the allocation is proportional
(S_h = 1: the uniform design). Every eligible stratum keeps at least ``floor`` x the uniform π,
so the estimate stays unbiased (no item has π = 0) and a wrong guess of S_h costs little.

Each item of stratum h gets π_h = n_h / N_h (capped at 1, the excess moved to the others), and
the draw is Bernoulli with these π, as the uniform and active designs draw: the estimators and
their design bootstrap assume independent draws with known π, and stratum-constant π is all
that allocation needs.

numpy only, no Django.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np


def inclusion_probabilities_stratified(
    strata: Sequence[Hashable],
    budget: float,
    *,
    spread: Mapping[Hashable, float] | None = None,
    eligible: Sequence[bool] | np.ndarray | None = None,
    floor: float = 0.25,
) -> np.ndarray:
    """π per item under Neyman allocation of ``budget`` over ``strata`` (one key per item).

    ``spread`` maps a stratum key to S_h (missing or None: proportional allocation, S_h = 1).
    Ineligible items (already drawn) get π = 0 and do not count in N_h. Σ π = min(budget,
    eligible items)."""
    n = len(strata)
    mask = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"eligible: {mask.shape[0]} values for {n} items.")
    if budget < 0:
        raise ValueError("budget: must be >= 0.")
    if not 0.0 <= floor <= 1.0:
        raise ValueError("floor: must lie in [0, 1].")
    pi = np.zeros(n)
    n_eligible = int(mask.sum())
    if n_eligible == 0 or budget == 0:
        return pi
    budget = min(float(budget), float(n_eligible))
    keys = sorted({strata[int(i)] for i in np.flatnonzero(mask)}, key=repr)
    index = {key: j for j, key in enumerate(keys)}
    codes = np.array([index[strata[i]] if mask[i] else -1 for i in range(n)])
    sizes = np.bincount(codes[mask], minlength=len(keys)).astype(float)
    s = np.array([max(float((spread or {}).get(key) or 0.0), 0.0) if spread else 1.0 for key in keys])
    if not np.any(s > 0):
        s = np.ones(len(keys))
    uniform = budget / n_eligible
    lo = floor * uniform

    # Neyman: n_h ∝ N_h S_h, i.e. π_h = c S_h; find c with Σ N_h clip(c S_h, lo, 1) = budget
    # (monotone in c: bisection).
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
        # Every stratum with a spread is taken whole and the budget is not spent: the rest goes
        # evenly to the strata whose spread was 0 (a common floor t instead of lo).
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
    """S per detector output from earlier rounds' labelled items: √((Σ w r² + prior)/(Σ w + 1)),
    one pseudo-item of second moment ``prior`` keeping an output whose few labels were all
    right from S = 0 (it would get only the floor)."""
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
    """π per item of the active design: labels go where the detector errs, as earlier rounds'
    labels measured it (active inference, Zrnic & Candès 2024). π_i ∝ S of the item's detector
    output (``spread``: output -> S, from ``residual_spread``), mixed with uniform,
    π = (1 - mix) π_S + mix · uniform, so that an output whose spread was underestimated from
    few labels still gets labels. Unlike the stratified design there are no prompt strata: the
    allocation follows the detector's output alone. Σ π = min(budget, eligible items)."""
    if not 0.0 <= mix <= 1.0:
        raise ValueError("mix: must lie in [0, 1].")
    keys = list(outputs)
    by_error = inclusion_probabilities_stratified(keys, budget, spread=spread, eligible=eligible, floor=floor)
    uniform = inclusion_probabilities_stratified(keys, budget, eligible=eligible)
    return (1.0 - mix) * by_error + mix * uniform
