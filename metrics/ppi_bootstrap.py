"""Design bootstraps of the prediction-powered estimate and their pseudo-population worlds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics.ppi_shares import (
    CovarianceModel,
    StudyData,
    class_counts,
    human_classes,
    later_weights,
    mean_abs,
    output_counts,
    ratio_scores,
)

# Grid of the human-only world's prior on a prompt's male share among clear images.
_GRID = 21
# Grid of the detector world's prior on a prompt's rest share (low quality, other).
_REST_GRID = 6
# Prompt-bootstrap fits of that prior per chunk of replicates.
_HYPER = 40
# Share of a flat prior mixed into that fitted prior.
_FLAT = 0.1


def _bootstrap_pis(data: StudyData, output_index: np.ndarray) -> np.ndarray:
    """Each round's π for the bootstrap, for images that were ineligible in reality too."""
    pis = data.pi.copy()
    n_out = int(output_index.max()) + 1 if output_index.size else 1
    cell = data.codes * n_out + output_index
    n_cells = data.n_prompts * n_out
    before = np.zeros(data.codes.size, dtype=bool)
    for k in range(data.rounds):
        row = pis[k]
        fill = before & (row <= 0)
        if fill.any():
            ok = row > 0
            cell_n = np.bincount(cell[ok], minlength=n_cells)
            cell_mean = np.bincount(cell[ok], weights=row[ok], minlength=n_cells) / np.maximum(cell_n, 1)
            prompt_n = np.bincount(data.codes[ok], minlength=data.n_prompts)
            prompt_mean = np.bincount(data.codes[ok], weights=row[ok], minlength=data.n_prompts) / np.maximum(
                prompt_n, 1
            )
            round_mean = float(row[ok].mean()) if ok.any() else 0.0
            idx = np.flatnonzero(fill)
            value = np.where(
                cell_n[cell[idx]] > 0,
                cell_mean[cell[idx]],
                np.where(prompt_n[data.codes[idx]] > 0, prompt_mean[data.codes[idx]], round_mean),
            )
            row[idx] = value
        before |= data.round_of == k
    return pis


#: At most this many (replicate, group of alike images, class x round) cells per chunk of the
#: design bootstrap: a few hundred MB of working arrays at most, whatever the study's size.
BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class Replicates:
    """One world's bootstrap: the replicates' true scores and each estimator's estimates."""

    theta: np.ndarray  # (B,) eq. 1 on the replicate's full population
    d_true: np.ndarray  # (B, P)
    plug_in: list[np.ndarray]  # per estimator (B,) model score, unclipped shares
    clipped: list[np.ndarray]  # per estimator (B,) model score from shares clipped at 0
    d_hat: list[np.ndarray]  # per estimator (B, P) prompt scores, clipped shares


def design_bootstrap(
    data: StudyData,
    world: Any,
    estimators: Sequence[np.ndarray],
    output_index: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
    chunk: int = 250,
) -> Replicates:
    """Replicates of the whole study in one pseudo-population ``world``, each estimator applied
    (drawn per group of exchangeable images, so the cost does not grow with the study)."""
    n_prompts, rounds = data.n_prompts, data.rounds
    known = np.where(data.labelled, human_classes(data.y), -1)
    pis = _bootstrap_pis(data, output_index)
    later = later_weights(data.weights)
    positive = pis > 0
    round_coef = (
        np.where(positive, data.weights[:, None] / np.where(positive, pis, 1.0), 0.0) + later[:, None]
    )
    fs = [np.asarray(f, dtype=float).reshape(-1, 2) for f in estimators]
    columns = np.column_stack([data.codes, output_index, known, pis.T, round_coef.T, *fs])
    # Rows come back sorted, prompt first: the groups of one prompt are contiguous.
    groups, sizes = np.unique(columns, axis=0, return_counts=True)
    n_groups = groups.shape[0]
    prompt_of = groups[:, 0].astype(np.int64)
    output_of = groups[:, 1].astype(np.int64)
    known_of = groups[:, 2].astype(np.int64)
    g_pi = groups[:, 3 : 3 + rounds]
    g_coef = groups[:, 3 + rounds : 3 + 2 * rounds]
    g_f = [groups[:, 3 + 2 * rounds + 2 * j : 5 + 2 * rounds + 2 * j] for j in range(len(fs))]
    starts = np.searchsorted(prompt_of, np.arange(n_prompts))
    # P(first drawn in round k), k < K, and P(never drawn) in the last column: (G, K + 1).
    stay = np.cumprod(np.column_stack([np.ones(n_groups), 1.0 - g_pi]), axis=1)
    p_round = np.column_stack([stay[:, :rounds] * g_pi, stay[:, rounds]])
    coef_round = np.column_stack([g_coef, np.zeros(n_groups)])
    unlabelled = known_of < 0
    fixed = np.zeros((n_groups, 3))
    fixed[~unlabelled, known_of[~unlabelled]] = 1.0
    f_sums = [
        np.stack([np.bincount(data.codes, weights=f[:, c], minlength=n_prompts) for c in (0, 1)], axis=1)
        for f in fs
    ]
    cells = 3 * (rounds + 1)
    chunk = max(1, min(chunk, BOOTSTRAP_CHUNK_ELEMENTS // max(n_groups * cells, 1)))
    theta, d_true = [], []
    plug: list[list[np.ndarray]] = [[] for _ in fs]
    clip: list[list[np.ndarray]] = [[] for _ in fs]
    d_hat: list[list[np.ndarray]] = [[] for _ in fs]
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        done += b
        t_male, t_clear = world(rng, b, prompt_of, output_of)
        t_male = np.clip(np.asarray(t_male, dtype=float), 0.0, 1.0)
        t_clear = np.clip(np.asarray(t_clear, dtype=float), 0.0, 1.0)
        drawn = np.stack(
            [t_male, np.maximum(t_clear - t_male, 0.0), 1.0 - np.maximum(t_clear, t_male)], axis=2
        )
        classes = np.where(unlabelled[None, :, None], drawn, fixed[None])  # (b, G, 3)
        pvals = (classes[:, :, :, None] * p_round[None, :, None, :]).reshape(b, n_groups, cells)
        pvals /= pvals.sum(axis=2, keepdims=True)
        counts = rng.multinomial(np.broadcast_to(sizes, (b, n_groups)), pvals).reshape(
            b, n_groups, 3, rounds + 1
        )
        by_class = counts.sum(axis=3).astype(float)
        true_m = np.add.reduceat(by_class[:, :, 0], starts, axis=1)
        true_f = np.add.reduceat(by_class[:, :, 1], starts, axis=1)
        d = ratio_scores(true_m, true_f)
        theta.append(mean_abs(d))
        d_true.append(d)
        weighted = counts * coef_round[None, :, None, :]  # each image's coefficient, summed
        corr_m = np.add.reduceat(weighted[:, :, 0, :].sum(axis=2), starts, axis=1)
        corr_f = np.add.reduceat(weighted[:, :, 1, :].sum(axis=2), starts, axis=1)
        coef_total = weighted.sum(axis=(2, 3))  # (b, G)
        for j in range(len(fs)):
            est_m = f_sums[j][:, 0] + corr_m - np.add.reduceat(coef_total * g_f[j][:, 0], starts, axis=1)
            est_f = f_sums[j][:, 1] + corr_f - np.add.reduceat(coef_total * g_f[j][:, 1], starts, axis=1)
            plug[j].append(mean_abs(ratio_scores(est_m, est_f)))
            dc = ratio_scores(np.maximum(est_m, 0.0), np.maximum(est_f, 0.0))
            clip[j].append(mean_abs(dc))
            d_hat[j].append(dc)
    return Replicates(
        np.concatenate(theta),
        np.concatenate(d_true),
        [np.concatenate(x) for x in plug],
        [np.concatenate(x) for x in clip],
        [np.concatenate(x) for x in d_hat],
    )


def detector_world(data: StudyData, model: CovarianceModel, output_index: np.ndarray) -> Any:
    """Pseudo-populations for the prediction-powered interval: the detector's confusion and each
    prompt's class shares drawn from their posteriors, then every unlabelled image's class."""
    n_out = model.likelihood.shape[1]
    n_prompts = data.n_prompts
    known = human_classes(data.y)
    labelled_counts = class_counts(data, known)
    unlabelled_counts = output_counts(data, output_index, n_out)
    q_mesh, r_mesh = np.meshgrid(
        np.linspace(0.0, 1.0, _GRID), np.linspace(0.0, 1.0, _REST_GRID), indexing="ij"
    )
    q, r = q_mesh.reshape(-1), r_mesh.reshape(-1)
    grid = np.stack([(1 - r) * q, (1 - r) * (1 - q), r], axis=1)  # (G, 3)
    # log 0 as a large finite negative: 0 x log 0 = 0, and a point ruling out a label gets no mass.
    log_grid = np.log(np.maximum(grid, 1e-300))
    # Labelled images: P(class) = share (their outputs' likelihood does not depend on it).
    label_part = labelled_counts @ log_grid.T  # (P, G)

    # A share (1 - κ²)/2 of the replicates learns the shares from the labels alone (see estimator.md).
    like_labels = np.exp(label_part - label_part.max(axis=1, keepdims=True))
    share_labels_only = 0.5 * (1 - _signal_share(model.confusion_counts) ** 2)

    def log_like(likelihood: np.ndarray) -> np.ndarray:
        """(..., P, G) log-likelihood of each prompt's data at each grid point."""
        log_mix = np.log(np.maximum(np.einsum("gc,...co->...go", grid, likelihood), 1e-300))
        return np.einsum("po,...go->...pg", unlabelled_counts, log_mix) + label_part

    point = log_like(model.likelihood)
    like = np.exp(point - point.max(axis=1, keepdims=True))  # (P, G), for the prior's fit
    n_grid = grid.shape[0]
    q_step, r_step = 1.0 / (_GRID - 1), 1.0 / (_REST_GRID - 1)

    def draw(
        rng: np.random.Generator, b: int, prompts: np.ndarray, outputs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        confusion = rng.gamma(np.broadcast_to(model.confusion_counts, (b, *model.confusion_counts.shape)))
        confusion /= confusion.sum(axis=2, keepdims=True)  # (b, 3, outputs)
        labels_only = rng.random(b) < share_labels_only
        resample = rng.multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts), size=min(b, _HYPER // 2))
        pick_fit = rng.integers(resample.shape[0], size=b)
        prior = _grid_npmle(like, resample.astype(float))[pick_fit]
        if labels_only.any():
            prior[labels_only] = _grid_npmle(like_labels, resample.astype(float))[pick_fit[labels_only]]
        # Half the replicates use betas with the grid prior's moments: the grid prior's shape is a guess.
        smooth = rng.random(b) < 0.5
        if smooth.any():
            prior[smooth] = _beta_grid(prior[smooth], q, r, q_step, r_step)
        prior = (1 - _FLAT) * prior + _FLAT / n_grid  # (b, G)
        logs = log_like(confusion)  # (b, P, G)
        logs[labels_only] = label_part
        post = np.exp(logs - logs.max(axis=2, keepdims=True)) * prior[:, None, :]
        post /= post.sum(axis=2, keepdims=True)
        pick = np.minimum((rng.random((b, n_prompts, 1)) > post.cumsum(axis=2)).sum(axis=2), n_grid - 1)
        # A grid point, jittered within its cell (edges stay exact: all-male prompts exist).
        q_b = q[pick] + np.where((q[pick] > 0) & (q[pick] < 1), (rng.random(pick.shape) - 0.5) * q_step, 0.0)
        r_b = r[pick] + np.where((r[pick] > 0) & (r[pick] < 1), (rng.random(pick.shape) - 0.5) * r_step, 0.0)
        shares = np.stack([(1 - r_b) * q_b, (1 - r_b) * (1 - q_b), r_b], axis=2)  # (b, P, 3)
        joint = confusion.transpose(0, 2, 1)[:, None, :, :] * shares[:, :, None, :]  # (b, P, O, 3)
        total = joint.sum(axis=3, keepdims=True)
        post_class = np.where(total > 0, joint / np.where(total > 0, total, 1.0), 1 / 3)[:, prompts, outputs]
        return post_class[:, :, 0], post_class[:, :, 0] + post_class[:, :, 1]

    return draw


def human_world(data: StudyData) -> Any:
    """Pseudo-populations from the human labels alone, for the human-only interval."""
    lab = data.labelled
    known = human_classes(data.y)
    weight = np.zeros(data.codes.size)
    weight[lab] = 1.0 / data.pi_at[lab]
    raw = class_counts(data, known, weight[lab])
    # Kish's effective number of labels, (Σ w)² / Σ w²: unequal weights carry less information.
    total = raw.sum(axis=1)
    square = np.bincount(data.codes[lab], weights=weight[lab] ** 2, minlength=data.n_prompts)
    n_eff = np.where(square > 0, total**2 / np.where(square > 0, square, 1.0), 0.0)
    counts = np.where(total[:, None] > 0, raw * (n_eff / np.where(total > 0, total, 1.0))[:, None], 0.0)
    k_m, k_f, k_r = counts[:, 0], counts[:, 1], counts[:, 2]
    clear = k_m + k_f
    n_prompts = data.n_prompts
    labelled_counts = class_counts(data, known)

    grid = np.linspace(0.0, 1.0, _GRID)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_like = np.where(k_m[:, None] > 0, k_m[:, None] * np.log(grid[None, :]), 0.0) + np.where(
            k_f[:, None] > 0, k_f[:, None] * np.log1p(-grid[None, :]), 0.0
        )
    like = np.exp(log_like - log_like.max(axis=1, keepdims=True))  # (P, G), rows scaled

    def draw(
        rng: np.random.Generator, b: int, prompts: np.ndarray, outputs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        resample = rng.multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts), size=b).astype(float)
        a_r, b_r = _beta_moments(resample, k_r, k_r + clear)
        rest = rng.beta(a_r[:, None] + k_r, b_r[:, None] + clear)
        # The grid prior is the costly fit: _HYPER fits per chunk, shared out among its replicates.
        fits = min(b, _HYPER)
        prior = _grid_npmle(like, resample[:fits])[rng.integers(fits, size=b)]  # (b, G)
        # A defensive share of flat prior: with ~2 labels a prompt the NPMLE is spiky.
        prior = (1 - _FLAT) * prior + _FLAT / _GRID
        post = prior[:, None, :] * like[None, :, :]
        post /= post.sum(axis=2, keepdims=True)
        pick = (rng.random((b, n_prompts, 1)) > post.cumsum(axis=2)).sum(axis=2)
        # A grid point, jittered within its cell so shares are not all multiples of 1/20.
        jitter = (rng.random((b, n_prompts)) - 0.5) / (_GRID - 1)
        at_edge = (pick == 0) | (pick == _GRID - 1)
        male = np.where(
            at_edge,
            grid[np.minimum(pick, _GRID - 1)],
            np.clip(grid[np.minimum(pick, _GRID - 1)] + jitter, 0, 1),
        )
        # Half the replicates use a beta prior: with ~2 labels a prompt the grid prior's shape is a guess.
        a_m, b_m = _beta_moments(resample, k_m, clear)
        smooth = rng.beta(a_m[:, None] + k_m, b_m[:, None] + k_f)
        male = np.where(rng.random((b, 1)) < 0.5, male, smooth)
        shares = np.stack([(1 - rest) * male, (1 - rest) * (1 - male), rest], axis=2)
        # The shares of all the prompt's images: the unlabelled ones get what the labelled ones leave.
        left = np.maximum(shares * data.n_per_prompt[None, :, None] - labelled_counts[None], 0.0)
        left_total = left.sum(axis=2, keepdims=True)
        left = np.where(left_total > 0, left / np.where(left_total > 0, left_total, 1.0), shares)
        return left[:, prompts, 0], (left[:, :, 0] + left[:, :, 1])[:, prompts]

    return draw


def _signal_share(counts: np.ndarray) -> float:
    """κ = max(0, 1 - df / X²): the James-Stein share of the detector's signal."""
    counts = counts[counts.sum(axis=1) > 0][:, counts.sum(axis=0) > 0]
    if counts.shape[0] < 2 or counts.shape[1] < 2:
        return 0.0
    expected = counts.sum(axis=1, keepdims=True) * counts.sum(axis=0, keepdims=True) / counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = (counts.shape[0] - 1) * (counts.shape[1] - 1)
    return max(0.0, 1.0 - df / chi2) if chi2 > 0 else 0.0


def _beta_grid(prior: np.ndarray, q: np.ndarray, r: np.ndarray, q_step: float, r_step: float) -> np.ndarray:
    """(b, G) priors on the (q, r) grid: products of two moment-matched betas, normalised."""
    out = np.ones_like(prior)
    for values, step in ((q, q_step), (r, r_step)):
        mean = np.clip(prior @ values, 1e-3, 1 - 1e-3)
        var = prior @ values**2 - mean**2
        size = np.clip(
            np.where(var > 0, mean * (1 - mean) / np.maximum(var, 1e-12) - 1, 1000.0), 0.05, 1000.0
        )
        a, b = (mean * size)[:, None], ((1 - mean) * size)[:, None]
        at = np.clip(values, step / 4, 1 - step / 4)[None, :]
        log_density = (a - 1) * np.log(at) + (b - 1) * np.log1p(-at)
        out *= np.exp(log_density - log_density.max(axis=1, keepdims=True))
    return out / out.sum(axis=1, keepdims=True)


def _grid_npmle(like: np.ndarray, weights: np.ndarray, iterations: int = 60) -> np.ndarray:
    """(b, G) prior weights on the grid by nonparametric maximum likelihood (EM), per row of ``weights``."""
    n_grid = like.shape[1]
    prior = np.full((weights.shape[0], n_grid), 1.0 / n_grid)
    total = weights.sum(axis=1, keepdims=True)
    like_t = np.ascontiguousarray(like.T)
    # A step: posterior of p at g = prior[b, g] like[p, g] / (prior likeᵀ)[b, p]: two matrix products.
    ratio = np.zeros_like(weights, dtype=float)
    for _ in range(iterations):
        norm = prior @ like_t
        # A prompt with a sharp likelihood where the prior has no mass has posterior 0, not 0/0 = NaN.
        ratio = np.divide(weights, norm, out=ratio, where=norm > 0)
        ratio[norm <= 0] = 0.0
        prior = prior * (ratio @ like) / total
        prior /= np.maximum(prior.sum(axis=1, keepdims=True), 1e-300)
    return prior


def _beta_moments(
    weights: np.ndarray, successes: np.ndarray, trials: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) matching the first two moments of the share behind the counts, per row of ``weights``."""
    two = trials >= 2
    safe = np.where(two, trials, 2.0)
    first = np.where(two, successes / safe, 0.0)
    second = np.where(two, successes * (successes - 1) / (safe * (safe - 1)), 0.0)
    used = weights @ two.astype(float)
    ok = used > 0
    mean = np.clip((weights @ first) / np.where(ok, used, 1.0), 1e-3, 1 - 1e-3)
    var = (weights @ second) / np.where(ok, used, 1.0) - mean**2
    size = np.where(var > 0, mean * (1 - mean) / np.where(var > 0, var, 1.0) - 1, 1000.0)
    size = np.where(ok, np.clip(size, 0.05, 1000.0), 2.0)
    mean = np.where(ok, mean, 0.5)
    return mean * size, (1 - mean) * size
