"""Sampling designs for the human labels: Bernoulli π (uniform or active) and the seeded draw."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from metrics.ppi_shares import (
    CovarianceModel,
    OutputCodes,
    PromptIds,
    Seed,
    quad,
)

# --- Sampling designs -----------------------------------------------------------------------------


def eligible_budget(
    n: int, eligible: np.ndarray | Sequence[bool] | None, budget: float
) -> tuple[np.ndarray, float]:
    """The eligible items' mask (default: all ``n``) and the budget capped at their number."""
    mask = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"eligible: {mask.shape[0]} values for {n} items.")
    if budget < 0:
        raise ValueError("budget: must be >= 0.")
    return mask, min(float(budget), float(mask.sum()))


def _scale_to_budget(score: np.ndarray, budget: float, lo: float) -> np.ndarray:
    """π_i = clip(c · score_i, lo, 1) with c such that Σ π_i = budget (bisection: monotone in c)."""
    n = score.size
    if budget >= n - 1e-12:
        return np.ones(n)
    if lo * n > budget + 1e-9:
        raise ValueError(f"A floor of {lo} on {n} images exceeds the budget {budget}.")
    if not (score > 0).any():
        return np.full(n, budget / n)
    low, high = 0.0, 1.0
    while np.clip(high * score, lo, 1.0).sum() < budget:
        high *= 2.0
    for _ in range(60):
        mid = (low + high) / 2
        if np.clip(mid * score, lo, 1.0).sum() < budget:
            low = mid
        else:
            high = mid
    pi = np.clip(high * score, lo, 1.0)
    # Bisection leaves the sum a hair off; give the difference to the images not at a bound.
    free = (pi > lo) & (pi < 1.0)
    if free.any():
        pi[free] *= (budget - pi[~free].sum()) / pi[free].sum()
        pi = np.clip(pi, lo, 1.0)
    return pi


def inclusion_probabilities_uniform(
    n: int, budget: float, *, eligible: np.ndarray | Sequence[bool] | None = None
) -> np.ndarray:
    """Bernoulli design with π = budget / n_eligible for every eligible image, 0 for the others."""
    mask, budget = eligible_budget(n, eligible, budget)
    pi = np.zeros(n)
    if mask.any():
        pi[mask] = budget / int(mask.sum())
    return pi


def inclusion_probabilities_active(
    detector_outputs: OutputCodes,
    prompt_ids: PromptIds,
    cov_model: CovarianceModel,
    budget: float,
    *,
    mix: float = 0.2,
    floor: float | None = None,
    eligible: np.ndarray | Sequence[bool] | None = None,
) -> np.ndarray:
    """Active Bernoulli design: π_i ∝ sqrt(a_pᵀ E[r_i r_iᵀ | output, prompt] a_p) / N_p, mixed and floored."""
    outputs = np.asarray(detector_outputs, dtype=np.int64)
    n = outputs.size
    mask, budget = eligible_budget(n, eligible, budget)
    if not 0.0 <= mix <= 1.0:
        raise ValueError("mix must lie in [0, 1].")
    pi = np.zeros(n)
    n_eligible = int(mask.sum())
    if budget == 0:
        return pi
    uniform = budget / n_eligible
    lo = 0.25 * uniform if floor is None else float(floor)
    if lo > uniform + 1e-12:
        raise ValueError(f"A floor of {lo} on {n_eligible} images exceeds the budget {budget}.")
    ids = np.asarray(prompt_ids)
    index = cov_model.prompt_index(ids[mask])
    _, codes = np.unique(ids, return_inverse=True)
    n_p = np.bincount(codes.reshape(-1))[codes.reshape(-1)][mask].astype(float)
    moments = cov_model.moments_at(index, cov_model.output_index(outputs[mask]), None)
    score = np.sqrt(np.maximum(quad(cov_model.sensitivity[index], moments), 0.0)) / n_p
    active = _scale_to_budget(score, budget, 0.0)
    mixed = (1 - mix) * active + mix * uniform
    pi[mask] = _scale_to_budget(mixed, budget, lo)
    return pi


def draw_bernoulli(pi: np.ndarray | Sequence[float], seed: Seed) -> np.ndarray:
    """A seeded Bernoulli draw: image i is in with probability π_i, independently."""
    p = np.asarray(pi, dtype=float)
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("Inclusion probabilities must lie in [0, 1].")
    return np.random.default_rng(seed).random(p.shape) < p
