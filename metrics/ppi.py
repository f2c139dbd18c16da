"""Prediction-powered (AIPW) estimates of the paper's bias scores from a sample of human labels.

A detector labels every image; humans label a random sample drawn with known inclusion
probabilities π, and their labels correct the detector's errors. The estimate targets the score
the humans would give if they labelled every image; its interval comes from a bootstrap over the
sampling design, with power tuning (λ) and several rounds. Definitions and derivations:
docs/explanation/estimator.md.
"""

from __future__ import annotations

import math
import warnings as warnings_module
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

#: A seed for numpy's default_rng: an int or a sequence of ints.
Seed = int | Sequence[int]

#: Two-sided 95 % normal quantile.
Z95 = NormalDist().inv_cdf(0.975)
#: Prompts with fewer sampled labels than this get a warning (their variance is a guess).
MIN_LABELS = 4
#: Folds of the images for cross-fitting the detector's weight λ.
POWER_FOLDS = 5
#: Human classes, in the order of every (.., 3) array here; "rest" = low quality or other.
CLASSES: tuple[str, str, str] = ("male", "female", "rest")
#: The vector of each class, (male, female).
CLASS_VECTORS = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
# Grid of the human-only world's prior on a prompt's male share among clear images.
_GRID = 21
# Grid of the detector world's prior on a prompt's rest share (low quality, other).
_REST_GRID = 6
# Prompt-bootstrap fits of that prior per chunk of replicates.
_HYPER = 40
# Share of a flat prior mixed into that fitted prior.
_FLAT = 0.1
# Denominators below this count as zero (a prompt without clear images has no score).
_EPS = 1e-12

Interval = tuple[float, float]


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptEstimate:
    """One prompt: the estimated prompt bias score d̂_p (eq. 2 on the AIPW shares, unclipped;
    None when the estimated clear share μ̂_m + μ̂_f is <= 0), the estimated shares, and how many
    images and labels it rests on.

    ``ci95`` is the design-bootstrap interval (clipped to [-1, 1]): with d̃_p the score on shares
    clipped at 0 and e*_p = d̃*_p - d*_p its errors over the pseudo-populations,
    [d̃_p - q97.5, d̃_p - q2.5]. ``delta_ci95`` is the delta-method interval d̂_p ± 1.96 ``se``
    (se from max(HT, model-based) variance), kept for reference: with few labels the ratio is
    far from linear and it is very conservative. ``warning`` says why the interval deserves
    little trust (fewer than ``min_labels`` labels), else None."""

    estimate: float | None
    ci95: Interval | None
    se: float | None
    delta_ci95: Interval | None
    male_share: float
    female_share: float
    n_images: int
    n_labelled: int
    warning: str | None

    def as_json(self) -> dict[str, Any]:
        """``{estimate, ci95, n_images, n_labelled}``, the contract's per-prompt shape."""
        return {
            "estimate": self.estimate,
            "ci95": list(self.ci95) if self.ci95 is not None else None,
            "n_images": self.n_images,
            "n_labelled": self.n_labelled,
        }


@dataclass(frozen=True)
class ScoreEstimate:
    """A model bias score (eq. 1) with its interval.

    ``estimate`` is the plug-in mean of |d̂_p| over the ``n_scored`` prompts that have a score
    (``unscored`` lists the others); unclipped, it can exceed 1. ``ci95`` is the design-bootstrap
    interval of docs/explanation/estimator.md (clipped to [0, 1], where the score lives),
    ``bias_corrected`` the bootstrap's bias-corrected estimate, ``se`` and ``delta_ci95`` the
    delta method's standard error and interval (for reference: biased upward when labels are
    few). Everything is None when no prompt has a score."""

    estimate: float | None
    ci95: Interval | None
    se: float | None
    bias_corrected: float | None
    delta_ci95: Interval | None
    n_scored: int
    unscored: tuple[Hashable, ...]

    def as_json(self) -> dict[str, Any]:
        """``{estimate, ci95, bias_corrected}``."""
        return {
            "estimate": self.estimate,
            "ci95": list(self.ci95) if self.ci95 is not None else None,
            "bias_corrected": self.bias_corrected,
        }


@dataclass(frozen=True)
class ModelBiasEstimate:
    """Everything the estimate reports for one T2I model.

    ``model_bias_score`` is the prediction-powered estimate, ``human_only`` the same design with
    f = 0 (Horvitz-Thompson on the sample), ``detector_only`` eq. 1 on the detector's verdicts
    alone (no interval: it is a fixed number, biased by the detector's errors). ``prompts`` maps
    each prompt id to its ``PromptEstimate`` (prediction-powered). ``labels_for_half_width`` is
    how many more labels one more round (uniform over the unlabelled images) would need so
    that the model score's interval is half as wide; 0 when it already has width 0, None when
    undefined. ``lambda_`` is the detector's weight (``PowerTuning``; 1 without tuning) and
    ``effective_labels`` the labels alone would need for the same variance (None when not
    tuned or without labels)."""

    model_bias_score: ScoreEstimate
    human_only: ScoreEstimate
    detector_only: float | None
    prompts: Mapping[Hashable, PromptEstimate]
    n_images: int
    n_labelled: int
    rounds: int
    round_weights: tuple[float, ...]
    labels_for_half_width: int | None
    warnings: tuple[str, ...]
    lambda_: float | None = None
    effective_labels: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The estimate's JSON contract (prompt ids become strings); undefined figures are None.
        ``lambda`` and ``effective_labels`` sit beside the estimate."""
        return {
            "model_bias_score": self.model_bias_score.as_json(),
            "human_only": self.human_only.as_json(),
            "detector_only": self.detector_only,
            "lambda": self.lambda_,
            "effective_labels": self.effective_labels,
            "n_images": self.n_images,
            "n_labelled": self.n_labelled,
            "rounds": self.rounds,
            "prompts": {str(k): p.as_json() for k, p in self.prompts.items()},
            "labels_for_half_width": self.labels_for_half_width,
            "warnings": list(self.warnings),
        }


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def gender_vectors(labels: Sequence[str | None], *, none_is_unknown: bool = True) -> np.ndarray:
    """(n, 2) vectors of labels: "male" (1, 0), "female" (0, 1), any other string (low quality,
    other, filtered, failed) (0, 0). None is "not known" -- a NaN row -- with
    ``none_is_unknown`` (human labels of images not drawn), else (0, 0) (a detector that failed).
    """
    out = np.zeros((len(labels), 2))
    for i, label in enumerate(labels):
        if label is None:
            if none_is_unknown:
                out[i] = np.nan
        elif label == CLASSES[0]:
            out[i, 0] = 1.0
        elif label == CLASSES[1]:
            out[i, 1] = 1.0
    return out


def _prompt_codes(prompt_ids: Sequence[Hashable] | np.ndarray) -> tuple[tuple[Hashable, ...], np.ndarray]:
    """Sorted distinct prompt ids and each image's index among them."""
    ids = np.asarray(prompt_ids)
    if ids.ndim != 1:
        raise ValueError("prompt_ids must be one id per image.")
    if ids.size == 0:
        return (), np.zeros(0, dtype=np.int64)
    keys, codes = np.unique(ids, return_inverse=True)
    return tuple(k.item() if isinstance(k, np.generic) else k for k in keys), codes.astype(np.int64)


def _as_rounds(values: np.ndarray | Sequence[Any], n: int, name: str, dtype: Any) -> np.ndarray:
    """``xi`` / ``pi`` as a (rounds, n) array: a 1-D array is one round."""
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n:
        raise ValueError(f"{name} must have shape (n,) or (rounds, n) with n = {n}; got {arr.shape}.")
    return arr


def default_round_weights(budgets: Sequence[float], n_images: int) -> np.ndarray:
    """Weights of the rounds' estimates, fixed by their budgets alone (docs/explanation/estimator.md, "Several rounds"):
    w_k ∝ n_k / (M_k (M_k - n_k)), M_k = n_images - Σ_{j<k} n_j; a round whose budget covers all
    images planned to be left takes all the weight. Sums to 1; empty for no round."""
    budgets_arr = np.asarray(budgets, dtype=float)
    if budgets_arr.size == 0:
        return budgets_arr
    if (budgets_arr < 0).any():
        raise ValueError("Round budgets must be >= 0.")
    left = n_images - np.concatenate([[0.0], np.cumsum(budgets_arr)[:-1]])
    complete = budgets_arr >= left - 1e-9
    if complete.any():
        weights = np.zeros_like(budgets_arr)
        weights[np.argmax(complete)] = 1.0
        return weights
    omega = budgets_arr / (left * (left - budgets_arr))
    if omega.sum() <= 0:
        raise ValueError("Every round has budget 0.")
    return omega / omega.sum()


@dataclass(frozen=True)
class _Data:
    """Validated inputs and the per-image coefficients of the (multi-round) estimator."""

    keys: tuple[Hashable, ...]
    codes: np.ndarray  # (n,) prompt index of each image
    n_per_prompt: np.ndarray  # (P,)
    f: np.ndarray  # (n, 2)
    y: np.ndarray  # (n, 2), NaN where not labelled
    pi: np.ndarray  # (K, n)
    labelled: np.ndarray  # (n,) bool
    round_of: np.ndarray  # (n,) round in which the image was labelled, -1 if never
    pi_at: np.ndarray  # (n,) π of that round (1 where not labelled)
    weights: np.ndarray  # (K,)
    coef: np.ndarray  # (n,) multiplier of r_i in the estimate (0 where not labelled)
    var_coef: np.ndarray  # (n,) multiplier of r_i r_iᵀ in the variance estimate (2)
    design_var: np.ndarray  # (n,) Σ_k w_k² (1 - π_ik)/π_ik over rounds i was eligible in: (1)
    warnings: tuple[str, ...]

    @property
    def n_prompts(self) -> int:
        return len(self.keys)

    @property
    def rounds(self) -> int:
        return int(self.pi.shape[0])


def _prepare(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    round_weights: Sequence[float] | None,
) -> _Data:
    keys, codes = _prompt_codes(prompt_ids)
    n = codes.size
    f_arr = np.asarray(f, dtype=float).reshape(n, 2) if n else np.zeros((0, 2))
    y_arr = np.asarray(y, dtype=float).reshape(n, 2) if n else np.zeros((0, 2))
    if not np.isfinite(f_arr).all():
        raise ValueError("f must be finite for every image (a failed detector is (0, 0)).")
    xi_arr = _as_rounds(xi, n, "xi", bool)
    pi_arr = _as_rounds(pi, n, "pi", float)
    if xi_arr.shape != pi_arr.shape:
        raise ValueError(f"xi and pi must have the same rounds; got {xi_arr.shape} and {pi_arr.shape}.")
    if np.isnan(pi_arr).any() or (pi_arr < 0).any() or (pi_arr > 1).any():
        raise ValueError("Inclusion probabilities must lie in [0, 1].")
    if (xi_arr & (pi_arr <= 0)).any():
        raise ValueError("An image was drawn in a round that gave it probability 0.")
    times = xi_arr.sum(axis=0)
    if (times > 1).any():
        raise ValueError("An image is labelled in more than one round; count it in its first only.")
    labelled = times == 1
    if not np.isfinite(y_arr[labelled]).all():
        raise ValueError("y must be known (finite) wherever xi = 1.")
    n_rounds = pi_arr.shape[0]
    round_of = np.where(labelled, np.argmax(xi_arr, axis=0), -1)
    before = np.zeros(n, dtype=bool)
    warnings: list[str] = []
    for k in range(n_rounds):
        if (pi_arr[k][before] > 0).any():
            raise ValueError(f"Round {k + 1} gives probability > 0 to images labelled in an earlier round.")
        left_out = int(((pi_arr[k] <= 0) & ~before).sum())
        if left_out:
            warnings.append(
                f"Round {k + 1} gave probability 0 to {left_out} image(s) not labelled before it: "
                "their detector errors are taken as 0, which biases the estimate."
            )
        before |= xi_arr[k]
    if round_weights is None:
        weights = default_round_weights(pi_arr.sum(axis=1), n)
        # A round that draws every image still unlabelled is complete even if its budget differs
        # from the plan (the realised number left is what it covers).
        eligible_before = np.ones(n, dtype=bool)
        for k in range(n_rounds):
            row = pi_arr[k][eligible_before]
            if row.size and (row >= 1).all():
                weights = np.zeros(n_rounds)
                weights[k] = 1.0
                break
            eligible_before &= ~xi_arr[k]
    else:
        weights = np.asarray(round_weights, dtype=float)
        if weights.shape != (n_rounds,) or (weights < 0).any() or not math.isclose(weights.sum(), 1.0):
            raise ValueError(f"round_weights must be {n_rounds} non-negative numbers summing to 1.")
    pi_at = np.ones(n)
    if labelled.any():
        pi_at[labelled] = pi_arr[round_of[labelled], np.flatnonzero(labelled)]
    # w_k/π_i for the round that labelled it, plus the weights of all later rounds (in which the
    # residual is "already known").
    later = np.concatenate([np.cumsum(weights[::-1])[::-1][1:], [0.0]]) if n_rounds else np.zeros(0)
    coef = np.zeros(n)
    var_coef = np.zeros(n)
    if labelled.any():
        w_at = weights[round_of[labelled]]
        coef[labelled] = w_at / pi_at[labelled] + later[round_of[labelled]]
        var_coef[labelled] = w_at**2 * (1 - pi_at[labelled]) / pi_at[labelled] ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        per_round = np.where(pi_arr > 0, (1 - pi_arr) / pi_arr, 0.0)
    design_var = (weights[:, None] ** 2 * per_round).sum(axis=0) if n_rounds else np.zeros(n)
    n_per_prompt = np.bincount(codes, minlength=len(keys)).astype(float)
    return _Data(
        keys,
        codes,
        n_per_prompt,
        f_arr,
        y_arr,
        pi_arr,
        labelled,
        round_of,
        pi_at,
        weights,
        coef,
        var_coef,
        design_var,
        tuple(warnings),
    )


# ---------------------------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------------------------


def _sum_by_prompt(codes: np.ndarray, values: np.ndarray, n_prompts: int) -> np.ndarray:
    """Per-prompt sums of the rows of ``values`` (n, ...) -> (P, ...)."""
    flat = values.reshape(values.shape[0], math.prod(values.shape[1:]))
    out = np.stack(
        [np.bincount(codes, weights=flat[:, j], minlength=n_prompts) for j in range(flat.shape[1])],
        axis=1,
    )
    return out.reshape((n_prompts, *values.shape[1:]))


def _shares(data: _Data, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ̂_p (P, 2) and its estimated covariance (2), (P, 2, 2), for detector vectors ``f``."""
    n_p = np.maximum(data.n_per_prompt, 1.0)
    total = _sum_by_prompt(data.codes, f, data.n_prompts)
    cov = np.zeros((data.n_prompts, 2, 2))
    lab = data.labelled
    if lab.any():
        r = data.y[lab] - f[lab]
        codes = data.codes[lab]
        total = total + _sum_by_prompt(codes, data.coef[lab, None] * r, data.n_prompts)
        outer = r[:, :, None] * r[:, None, :]
        cov = _sum_by_prompt(codes, data.var_coef[lab, None, None] * outer, data.n_prompts)
    return total / n_p[:, None], cov / (n_p**2)[:, None, None]


@dataclass(frozen=True)
class PromptShares:
    """The AIPW shares of every prompt and their estimated covariance (2), no delta method.

    ``shares[p]`` = μ̂_p = (male, female) and ``cov[p]`` its 2 x 2 covariance estimate, for
    ``keys[p]`` (sorted prompt ids); ``n_images`` and ``n_labelled`` per prompt."""

    keys: tuple[Hashable, ...]
    shares: np.ndarray
    cov: np.ndarray
    n_images: np.ndarray
    n_labelled: np.ndarray


def prompt_shares(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    round_weights: Sequence[float] | None = None,
) -> PromptShares:
    """μ̂_p = (1/N_p) Σ_i [f_i + c_i ξ_i (Y_i - f_i)] per prompt (c_i = 1/π_i with one round; the
    round-combined coefficient with several) and its covariance estimate
    (1/N_p²) Σ_i ξ_i e_i (Y_i - f_i)(Y_i - f_i)ᵀ (e_i = (1 - π_i)/π_i² with one round).
    Arguments as for ``estimate_model_bias``; f = 0 gives the Horvitz-Thompson shares."""
    data = _prepare(prompt_ids, f, y, xi, pi, round_weights)
    mu, cov = _shares(data, data.f)
    n_labelled = np.bincount(data.codes[data.labelled], minlength=data.n_prompts)
    return PromptShares(data.keys, mu, cov, data.n_per_prompt.astype(np.int64), n_labelled)


def _scores(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prompt scores d (NaN where μ_m + μ_f <= 0) and their gradients a = (2 μ_f, -2 μ_m)/s²."""
    clear = mu[:, 0] + mu[:, 1]
    ok = clear > _EPS
    safe = np.where(ok, clear, 1.0)
    d = np.where(ok, (mu[:, 0] - mu[:, 1]) / safe, np.nan)
    grad = np.stack([2 * mu[:, 1], -2 * mu[:, 0]], axis=1) / (safe**2)[:, None]
    return d, np.where(ok[:, None], grad, 0.0)


def _quad(a: np.ndarray, m: np.ndarray) -> np.ndarray:
    """aᵀ M a row by row: (k, 2) x (k, 2, 2) -> (k,)."""
    return np.einsum("ki,kij,kj->k", a, m, a)


def _human_classes(y: np.ndarray) -> np.ndarray:
    """Class index (0 male, 1 female, 2 rest) of human vectors; NaN rows come out as rest."""
    return np.where(y[:, 0] >= 0.5, 0, np.where(y[:, 1] >= 0.5, 1, 2)).astype(np.int64)


def _model_score(
    keys: tuple[Hashable, ...],
    d: np.ndarray,
    var_ht: np.ndarray,
    var_model: np.ndarray,
    d_clipped: np.ndarray,
    replicates: _Replicates | None,
    mode: Literal["pivot", "posterior"],
) -> ScoreEstimate:
    """Eq. 1 from prompt scores: the plug-in and its delta-method interval (variance
    max(Σ HT, Σ model) / P²), and the interval actually reported, from the bootstrap:

    * ``pivot`` (prediction-powered): with T = eq. 1 on shares clipped at 0 and e* = T* - θ*
      the replicates' errors, [T - q97.5(e*), T - q2.5(e*)]; bias-corrected T - mean(e*).
    * ``posterior`` (human only): the 2.5 and 97.5 % points of θ* over the empirical-Bayes
      pseudo-populations, and their mean.

    The interval is clipped to [0, 1]; without replicates it is the delta interval."""
    scored = ~np.isnan(d)
    unscored = tuple(k for k, s in zip(keys, scored, strict=True) if not s)
    n_scored = int(scored.sum())
    if n_scored == 0:
        return ScoreEstimate(None, None, None, None, None, 0, unscored)
    estimate = float(np.abs(d[scored]).mean())
    variance = max(float(var_ht[scored].sum()), float(var_model[scored].sum())) / n_scored**2
    se = math.sqrt(variance)
    delta = (estimate - Z95 * se, estimate + Z95 * se)
    corrected = None
    ci = (max(0.0, delta[0]), min(1.0, delta[1]))
    clipped = float(_mean_abs(d_clipped))
    if replicates is not None and not math.isnan(clipped):
        theta = replicates.theta[~np.isnan(replicates.theta)]
        if mode == "pivot":
            errors = replicates.clipped[0] - replicates.theta
            errors = errors[~np.isnan(errors)]
            if errors.size:
                lo, hi = np.percentile(errors, [2.5, 97.5])
                corrected = clipped - float(errors.mean())
                ci = (float(clipped - hi), float(clipped - lo))
                if theta.size:
                    # The union with the posterior range of θ* (docs/explanation/estimator.md).
                    post_lo, post_hi = np.percentile(theta, [2.5, 97.5])
                    ci = (min(ci[0], float(post_lo)), max(ci[1], float(post_hi)))
        elif theta.size:
            lo, hi = np.percentile(theta, [2.5, 97.5])
            corrected = float(theta.mean())
            ci = (float(lo), float(hi))
        ci = (min(1.0, max(0.0, ci[0])), max(0.0, min(1.0, ci[1])))
        if corrected is not None:
            # The point shown beside the interval lies in it (clipping at 0 or 1, or a skewed
            # error distribution, could otherwise put the mean error's correction outside).
            corrected = min(max(corrected, ci[0]), ci[1])
    return ScoreEstimate(estimate, ci, se, corrected, delta, n_scored, unscored)


def _bootstrap_pis(data: _Data, output_index: np.ndarray) -> np.ndarray:
    """Each round's π for the bootstrap, where an image may be unlabelled at a round it was not
    eligible for in reality (it was labelled earlier): it gets the mean π of the eligible images
    with the same prompt and detector output (the active design depends on nothing else), else
    of its prompt, else of the round."""
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
class _Replicates:
    """One pseudo-population world's bootstrap: the replicates' true scores and, per
    estimator, their estimates (NaN where undefined)."""

    theta: np.ndarray  # (B,) eq. 1 on the replicate's full population
    d_true: np.ndarray  # (B, P)
    plug_in: list[np.ndarray]  # per estimator (B,) model score, unclipped shares
    clipped: list[np.ndarray]  # per estimator (B,) model score from shares clipped at 0
    d_hat: list[np.ndarray]  # per estimator (B, P) prompt scores, clipped shares


def _design_bootstrap(
    data: _Data,
    world: Any,
    estimators: Sequence[np.ndarray],
    output_index: np.ndarray,
    n_boot: int,
    rng: np.random.Generator,
    chunk: int = 250,
) -> _Replicates:
    """Replicates of the whole study in one pseudo-population world.

    Each replicate keeps the labelled images' labels, draws a label for every other image from
    the world, redraws the rounds with their π (``_bootstrap_pis``) and the same round weights,
    and applies each estimator (its detector vectors ``f``; zeros = human only).
    ``world(rng, b, prompts, outputs)`` returns P(male) and P(male or female), shape (b, G),
    for G (prompt, detector output) pairs: the worlds give every image of one prompt and output
    the same probabilities.

    Images that agree in everything a replicate reads -- prompt, detector output, label if
    labelled, π and coefficient in every round, each estimator's detector vector -- are
    exchangeable. So a replicate does not draw each image: it draws, for each such group of n
    images, how many fall in each class and are first drawn in each round (or never), one
    multinomial of n over classes x rounds (class and draws are independent). The same
    replicates in distribution as drawing every image; the cost grows with the number of groups
    (about prompts x outputs x rounds' π), not with the study's size."""
    n_prompts, rounds = data.n_prompts, data.rounds
    known = np.where(data.labelled, _human_classes(data.y), -1)
    pis = _bootstrap_pis(data, output_index)
    later = np.concatenate([np.cumsum(data.weights[::-1])[::-1][1:], [0.0]])
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
        d = _ratio_scores(true_m, true_f)
        theta.append(_mean_abs(d))
        d_true.append(d)
        weighted = counts * coef_round[None, :, None, :]  # each image's coefficient, summed
        corr_m = np.add.reduceat(weighted[:, :, 0, :].sum(axis=2), starts, axis=1)
        corr_f = np.add.reduceat(weighted[:, :, 1, :].sum(axis=2), starts, axis=1)
        coef_total = weighted.sum(axis=(2, 3))  # (b, G)
        for j in range(len(fs)):
            est_m = f_sums[j][:, 0] + corr_m - np.add.reduceat(coef_total * g_f[j][:, 0], starts, axis=1)
            est_f = f_sums[j][:, 1] + corr_f - np.add.reduceat(coef_total * g_f[j][:, 1], starts, axis=1)
            plug[j].append(_mean_abs(_ratio_scores(est_m, est_f)))
            dc = _ratio_scores(np.maximum(est_m, 0.0), np.maximum(est_f, 0.0))
            clip[j].append(_mean_abs(dc))
            d_hat[j].append(dc)
    return _Replicates(
        np.concatenate(theta),
        np.concatenate(d_true),
        [np.concatenate(x) for x in plug],
        [np.concatenate(x) for x in clip],
        [np.concatenate(x) for x in d_hat],
    )


def _detector_world(data: _Data, model: CovarianceModel, output_index: np.ndarray) -> Any:
    """Pseudo-populations for the prediction-powered interval: posterior draws of the study's
    human labels under the detector's confusion model, with each prompt's class shares drawn
    from their empirical-Bayes posterior.

    In every replicate: a confusion P(output | class) from its Dirichlet posterior; for every
    prompt, class shares (male, female, rest) from their posterior given the prompt's detector
    outputs and labels under a prior fitted to all prompts (a discrete prior on a grid of male
    share among clear images x rest share, by nonparametric maximum likelihood on a bootstrap
    sample of the prompts, mixed with a flat prior); then every unlabelled image's class from
    P(class | output, shares) ∝ P(output | class) x share.

    Drawing the shares matters. With a few labels a prompt and a detector that errs
    often -- say one that calls a third of the women men and most low-quality images a gender
    -- a prompt's maximum-likelihood shares are noisy, and pseudo-populations built on them are
    less balanced than the truth: their prompt scores lie further from 0, where |·| adds less
    bias to the estimate, so the bootstrap under-corrects the upward bias of eq. 1 and the
    interval misses the truth from above (coverage 0.83 at 10 % labels in the simulation of
    bench/bench_estimator.py). Shares drawn from a posterior under a fitted prior have, over the
    prompts, the spread of the true shares and not more."""
    n_out = model.likelihood.shape[1]
    n_prompts = data.n_prompts
    lab = data.labelled
    known = _human_classes(data.y)
    labelled_counts = np.zeros((n_prompts, 3))
    np.add.at(labelled_counts, (data.codes[lab], known[lab]), 1.0)
    unlabelled_counts = np.bincount(
        data.codes[~lab] * n_out + output_index[~lab], minlength=n_prompts * n_out
    ).reshape(n_prompts, n_out)
    q_mesh, r_mesh = np.meshgrid(
        np.linspace(0.0, 1.0, _GRID), np.linspace(0.0, 1.0, _REST_GRID), indexing="ij"
    )
    q, r = q_mesh.reshape(-1), r_mesh.reshape(-1)
    grid = np.stack([(1 - r) * q, (1 - r) * (1 - q), r], axis=1)  # (G, 3)
    # log 0 as a large finite negative, so that 0 x log 0 = 0 and a grid point that rules out a
    # labelled class gets (almost) no posterior mass.
    log_grid = np.log(np.maximum(grid, 1e-300))
    # Labelled images: P(class) = share (their outputs' likelihood does not depend on it).
    label_part = labelled_counts @ log_grid.T  # (P, G)

    # A share of the replicates learns the prompts' shares from the labels alone (the images'
    # classes are still drawn given their outputs). Each replicate takes its confusion as
    # known; with a weak detector, chance differences between the confusion's rows make every
    # prompt's outputs look informative, and the pseudo-populations of either kind alone came
    # out too alike (coverage 0.91-0.92 with a detector independent of the truth, 0.95 for an
    # even mixture): the prompts' shares are barely identified with ~2 labels a prompt, and the
    # interval must span both guesses. The share is (1 - κ²)/2, κ the signal share of the
    # confusion (``_signal_share``): a half for a useless detector, almost none for a good one,
    # whose outputs do identify the shares (and whose interval the mixture would widen).
    like_labels = np.exp(label_part - label_part.max(axis=1, keepdims=True))
    share_labels_only = 0.5 * (1 - _signal_share(model.confusion_counts) ** 2)

    def log_like(likelihood: np.ndarray) -> np.ndarray:
        """(..., P, G) log-likelihood of each prompt's data at each grid point; ``likelihood``
        is (..., 3, outputs)."""
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
        # With a few labels a prompt the grid prior is spiky and its shape a guess: half the
        # replicates use a smooth prior instead, independent betas on the male share among
        # clear images and the rest share with the grid prior's means and variances (as the
        # human-only world does), so that the interval spans both guesses.
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


def _human_world(data: _Data) -> Any:
    """Pseudo-populations from the human labels alone, for the human-only interval (which must
    not borrow the detector's information). Each prompt's rest share gets a beta prior fitted
    by the method of moments; its male share among clear images, in half the replicates, a
    discrete prior on a grid of 21 values fitted by nonparametric maximum likelihood (EM) -- it
    can put mass exactly on all-male, all-female and balanced prompts, the mix the paper finds,
    which a beta cannot --, in the other half a beta by the method of moments (with 2 labels a
    prompt only two moments are identified, and the grid prior is spiky); all are updated with
    the prompt's own counts. Priors are re-fitted in every replicate on a
    bootstrap sample of the prompts, so that their uncertainty -- the dominant one when labels
    are few -- is carried into the interval. Counts are weighted 1/π and rescaled to Kish's
    effective number of labels."""
    lab = data.labelled
    known = _human_classes(data.y)
    weight = np.zeros(data.codes.size)
    weight[lab] = 1.0 / data.pi_at[lab]
    raw = np.zeros((data.n_prompts, 3))
    np.add.at(raw, (data.codes[lab], known[lab]), weight[lab])
    # Kish's effective number of labels, (Σ w)² / Σ w²: unequal weights carry less information.
    total = raw.sum(axis=1)
    square = np.bincount(data.codes[lab], weights=weight[lab] ** 2, minlength=data.n_prompts)
    n_eff = np.where(square > 0, total**2 / np.where(square > 0, square, 1.0), 0.0)
    counts = np.where(total[:, None] > 0, raw * (n_eff / np.where(total > 0, total, 1.0))[:, None], 0.0)
    k_m, k_f, k_r = counts[:, 0], counts[:, 1], counts[:, 2]
    clear = k_m + k_f
    n_prompts = data.n_prompts

    labelled_counts = np.zeros((n_prompts, 3))
    np.add.at(labelled_counts, (data.codes[lab], known[lab]), 1.0)

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
        # A defensive share of flat prior: with ~2 labels a prompt the NPMLE is spiky and would
        # make the posteriors overconfident.
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
        # With ~2 labels a prompt only two moments of the male share are identified and the
        # prior's shape is a guess: half the replicates use a beta prior (moments) instead,
        # so that the interval spans both guesses.
        a_m, b_m = _beta_moments(resample, k_m, clear)
        smooth = rng.beta(a_m[:, None] + k_m, b_m[:, None] + k_f)
        male = np.where(rng.random((b, 1)) < 0.5, male, smooth)
        shares = np.stack([(1 - rest) * male, (1 - rest) * (1 - male), rest], axis=2)
        # These are the shares of all the prompt's images; the unlabelled ones are what is left
        # after the labelled ones (which an unequal-probability design did not pick at random).
        left = np.maximum(shares * data.n_per_prompt[None, :, None] - labelled_counts[None], 0.0)
        left_total = left.sum(axis=2, keepdims=True)
        left = np.where(left_total > 0, left / np.where(left_total > 0, left_total, 1.0), shares)
        return left[:, prompts, 0], (left[:, :, 0] + left[:, :, 1])[:, prompts]

    return draw


def _signal_share(counts: np.ndarray) -> float:
    """κ = max(0, 1 - df / X²) for the class x output table ``counts``: X² is Pearson's
    statistic of independence and df = (rows - 1)(columns - 1) its expectation under
    independence, so κ is the James-Stein share of the rows' differences that is signal -- about
    0 for a detector independent of the truth, near 1 for a good one."""
    counts = counts[counts.sum(axis=1) > 0][:, counts.sum(axis=0) > 0]
    if counts.shape[0] < 2 or counts.shape[1] < 2:
        return 0.0
    expected = counts.sum(axis=1, keepdims=True) * counts.sum(axis=0, keepdims=True) / counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = (counts.shape[0] - 1) * (counts.shape[1] - 1)
    return max(0.0, 1.0 - df / chi2) if chi2 > 0 else 0.0


def _beta_grid(prior: np.ndarray, q: np.ndarray, r: np.ndarray, q_step: float, r_step: float) -> np.ndarray:
    """(b, G) priors on the (q, r) grid: a product of two betas with the means and variances of
    q and r under each row of ``prior``, evaluated at the grid points (edges moved a quarter
    step inwards, where a beta density may be infinite) and normalised."""
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
    """Prior weights on the grid maximising Π_p Σ_g w_g like[p, g] (EM), one fit per row of
    prompt ``weights`` (a bootstrap sample of prompts): (b, G)."""
    n_grid = like.shape[1]
    prior = np.full((weights.shape[0], n_grid), 1.0 / n_grid)
    total = weights.sum(axis=1, keepdims=True)
    like_t = np.ascontiguousarray(like.T)
    # A step: the posterior of prompt p on grid point g is prior[b, g] like[p, g] / norm[b, p],
    # norm = prior likeᵀ; its weighted sum over prompts is prior[b, g] ((weights / norm) like)[b, g].
    # Two matrix products a step, not a (resamples, prompts, grid) array.
    ratio = np.zeros_like(weights, dtype=float)
    for _ in range(iterations):
        norm = prior @ like_t
        # A prompt with many labels has a sharp likelihood; where the prior has left its grid
        # points (a resample without it), its posterior is 0 and must stay 0, not 0/0 = NaN.
        ratio = np.divide(weights, norm, out=ratio, where=norm > 0)
        ratio[norm <= 0] = 0.0
        prior = prior * (ratio @ like) / total
        prior /= np.maximum(prior.sum(axis=1, keepdims=True), 1e-300)
    return prior


def _beta_moments(
    weights: np.ndarray, successes: np.ndarray, trials: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Beta(a, b) whose first two moments match those of the share q behind the counts, one fit
    per row of prompt ``weights`` (a bootstrap sample of prompts). Each prompt with at least two
    (effective) trials gives unbiased k/n for E q and k(k - 1)/(n(n - 1)) for E q², averaged
    with the same weight per prompt (each prompt is one draw of q). a + b is kept in
    [0.05, 1000]; without such prompts the prior is Beta(1, 1)."""
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


def _ratio_scores(male: np.ndarray, female: np.ndarray) -> np.ndarray:
    """(m - f)/(m + f) elementwise, NaN where m + f <= 0."""
    clear = male + female
    ok = clear > _EPS
    return np.where(ok, (male - female) / np.where(ok, clear, 1.0), np.nan)


def _mean_abs(d: np.ndarray) -> np.ndarray:
    """Eq. 1 along the last axis: mean |d| over defined entries, NaN where none is."""
    ok = ~np.isnan(d)
    count = ok.sum(axis=-1)
    total = np.where(ok, np.abs(d), 0.0).sum(axis=-1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


# ---------------------------------------------------------------------------------------------
# Covariance model: E[r rᵀ | detector output, prompt]
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CovarianceModel:
    """What the labels so far say about the detector's errors, for the active design and for
    the model-based variance.

    ``likelihood[c, o]`` = P(detector output ``outputs[o]`` | human class ``CLASSES[c]``),
    learned from the labelled images (weighted 1/π, so it describes all images, not the
    sample) and assumed the same for every prompt; ``confusion_counts`` are the same counts in
    units of labels (plus the smoothing), the parameters of its Dirichlet posterior;
    ``prompt_shares[p]`` = the prompt's class shares (male, female, rest) by EM; Bayes' rule
    combines them into P(class | output, prompt). ``output_vectors[o]`` is the detector vector
    f of each output code and ``sensitivity[p]`` the gradient a_p of the prompt score."""

    outputs: tuple[int, ...]
    output_vectors: np.ndarray
    likelihood: np.ndarray
    confusion_counts: np.ndarray
    prompt_keys: tuple[Hashable, ...]
    prompt_shares: np.ndarray
    sensitivity: np.ndarray

    def _output_index(self, detector_outputs: np.ndarray | Sequence[int]) -> np.ndarray:
        outs = np.asarray(detector_outputs, dtype=np.int64)
        table = np.asarray(self.outputs, dtype=np.int64)
        index = np.searchsorted(table, outs)
        index = np.minimum(index, len(table) - 1)
        if outs.size and not (table[index] == outs).all():
            raise ValueError("Detector output codes the covariance model has not seen.")
        return index

    def _prompt_index(self, prompt_ids: np.ndarray | Sequence[Hashable]) -> np.ndarray:
        lookup = {k: i for i, k in enumerate(self.prompt_keys)}
        keys, codes = _prompt_codes(prompt_ids)
        index = np.array([lookup.get(k, -1) for k in keys], dtype=np.int64)
        if (index < 0).any():
            raise ValueError("Prompt ids the covariance model has not seen.")
        return index[codes] if codes.size else codes

    def posterior(
        self, prompt_ids: np.ndarray | Sequence[Hashable], detector_outputs: np.ndarray | Sequence[int]
    ) -> np.ndarray:
        """(n, 3) P(human class | detector output, prompt)."""
        return self._posterior(self._prompt_index(prompt_ids), self._output_index(detector_outputs))

    def second_moments(
        self,
        prompt_ids: np.ndarray | Sequence[Hashable],
        detector_outputs: np.ndarray | Sequence[int],
        f: np.ndarray | None = None,
    ) -> np.ndarray:
        """(n, 2, 2) E[(Y - f)(Y - f)ᵀ | output, prompt]; f defaults to each output's vector."""
        return self._moments(self._prompt_index(prompt_ids), self._output_index(detector_outputs), f)

    def _posterior(self, prompt_index: np.ndarray, output_index: np.ndarray) -> np.ndarray:
        joint = self.likelihood[:, output_index].T * self.prompt_shares[prompt_index]
        return joint / joint.sum(axis=1, keepdims=True)

    def _moments(
        self, prompt_index: np.ndarray, output_index: np.ndarray, f: np.ndarray | None
    ) -> np.ndarray:
        post = self._posterior(prompt_index, output_index)
        f_arr = self.output_vectors[output_index] if f is None else np.asarray(f, dtype=float)
        diff = CLASS_VECTORS[None, :, :] - f_arr[:, None, :]  # (n, 3 classes, 2)
        return np.einsum("nc,nci,ncj->nij", post, diff, diff)


def _output_codes(f: np.ndarray) -> np.ndarray:
    """One code per distinct detector vector (the default outputs: the verdicts)."""
    if f.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(f, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _fit_model(
    data: _Data, f: np.ndarray, outputs: np.ndarray, smoothing: float, prior_images: float
) -> CovarianceModel:
    """Confusion P(output | class) from the labelled images (weights 1/π, ``smoothing`` labels
    per cell), then each prompt's class shares by EM over its images: labelled ones count
    with their known class, the others with P(class | output, shares) -- the maximum-likelihood
    composition under the model, much steadier than the AIPW shares when labels are few --
    with ``prior_images`` images' worth of the pooled shares added so none is exactly 0."""
    table, out_index = np.unique(outputs, return_inverse=True)
    out_index = out_index.reshape(-1)
    n_out = table.size
    vectors = np.zeros((n_out, 2))
    if n_out:
        vectors = _sum_by_prompt(out_index, f, n_out) / np.bincount(out_index, minlength=n_out)[:, None]
    counts = np.full((3, max(n_out, 1)), float(smoothing))
    lab = data.labelled
    known = _human_classes(data.y)
    pooled = np.full(3, 1 / 3)
    if lab.any():
        # Weights 1/π rescaled to a mean of 1: counts in units of labels.
        weight = (1.0 / data.pi_at[lab]) / (1.0 / data.pi_at[lab]).mean()
        np.add.at(counts, (known[lab], out_index[lab]), weight)
        # The pooled class shares, with one label's worth of each class so that none is ruled
        # out when labels are few.
        pooled = (np.bincount(known[lab], weights=weight, minlength=3) + 1.0) / (weight.sum() + 3.0)
    likelihood = counts / counts.sum(axis=1, keepdims=True)
    shares = _em_shares(data, likelihood, out_index, known, pooled, prior_images)
    clear = shares[:, 0] + shares[:, 1]
    sensitivity = np.stack([2 * shares[:, 1], -2 * shares[:, 0]], axis=1) / (clear**2)[:, None]
    return CovarianceModel(
        tuple(int(t) for t in table), vectors, likelihood, counts, data.keys, shares, sensitivity
    )


def _em_shares(
    data: _Data,
    likelihood: np.ndarray,
    output_index: np.ndarray,
    known: np.ndarray,
    pooled: np.ndarray,
    prior_images: float,
) -> np.ndarray:
    """(P, 3) class shares per prompt maximising the likelihood of its detector outputs and
    labels (EM; ``likelihood`` is (3, outputs) P(output | class)). The unlabelled images enter
    only through their counts per (prompt, output), so each step costs P x outputs."""
    n_prompts, n_out = data.n_prompts, likelihood.shape[1]
    lab = data.labelled
    fixed = np.zeros((n_prompts, 3))
    np.add.at(fixed, (data.codes[lab], known[lab]), 1.0)
    cells = np.bincount(data.codes[~lab] * n_out + output_index[~lab], minlength=n_prompts * n_out).reshape(
        n_prompts, n_out
    )
    # One step: P(class c | output o, shares of p) = lik[c, o] s[p, c] / Σ_c' lik[c', o] s[p, c'],
    # summed over the prompt's unlabelled images = s[p, c] Σ_o cells[p, o] lik[c, o] / (s lik)[p, o]:
    # two small matrix products a step instead of a (prompts, outputs, classes) array (the
    # steps are many when the detector says little: this loop was half of a small estimate's time).
    prior = prior_images * pooled[None, :] + fixed
    total = data.n_per_prompt[:, None] + prior_images
    cells = cells.astype(float)
    lik_t = np.ascontiguousarray(likelihood.T)
    shares = np.repeat(pooled[None, :], n_prompts, axis=0)
    for _ in range(500):
        new = (prior + shares * ((cells / (shares @ likelihood)) @ lik_t)) / total
        if np.abs(new - shares).max() < 1e-7:
            return new
        shares = new
    return shares


def fit_covariance_model(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    detector_outputs: np.ndarray | Sequence[int] | None = None,
    round_weights: Sequence[float] | None = None,
    smoothing: float = 0.5,
    prior_images: float = 0.1,
) -> CovarianceModel:
    """Learn ``CovarianceModel`` from the labelled images of the rounds so far (arguments as for
    ``estimate_model_bias``). ``detector_outputs`` are integer codes of what the detector said
    -- e.g. verdict x confidence bin -- and default to one code per distinct f (the verdict).
    Needs at least one labelled image: draw the first round ``uniform``."""
    data = _prepare(prompt_ids, f, y, xi, pi, round_weights)
    if not data.labelled.any():
        raise ValueError("No labelled image to learn from: draw the first round uniformly.")
    outputs = _output_codes(data.f) if detector_outputs is None else np.asarray(detector_outputs, np.int64)
    if outputs.shape != (data.codes.size,):
        raise ValueError("detector_outputs must be one code per image.")
    return _fit_model(data, data.f, outputs, smoothing, prior_images)


# ---------------------------------------------------------------------------------------------
# Sampling designs
# ---------------------------------------------------------------------------------------------


def _eligible_mask(n: int, eligible: np.ndarray | Sequence[bool] | None) -> np.ndarray:
    if eligible is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(eligible, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"eligible must be one flag per image (n = {n}).")
    return mask


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
    """Bernoulli design with the same π = budget / n_eligible for every eligible image (0 for
    the others, e.g. images labelled in an earlier round); Σ π = min(budget, n_eligible)."""
    if budget < 0:
        raise ValueError("The budget must be >= 0.")
    mask = _eligible_mask(n, eligible)
    pi = np.zeros(n)
    n_eligible = int(mask.sum())
    if n_eligible:
        pi[mask] = min(1.0, budget / n_eligible)
    return pi


def inclusion_probabilities_active(
    detector_outputs: np.ndarray | Sequence[int],
    prompt_ids: np.ndarray | Sequence[Hashable],
    cov_model: CovarianceModel,
    budget: float,
    *,
    mix: float = 0.2,
    floor: float | None = None,
    eligible: np.ndarray | Sequence[bool] | None = None,
) -> np.ndarray:
    """Bernoulli design that puts more probability where the detector is least certain and the
    prompt's score most sensitive: π_i ∝ sqrt(a_pᵀ E[r_i r_iᵀ | output, prompt] a_p) / N_p
    (the variance-minimising allocation for the model score), mixed with uniform,
    π = (1 - mix) π_active + mix · uniform, then floored at ``floor`` (default: a quarter of the
    uniform probability) and capped at 1, keeping Σ π = budget over the eligible images.

    ``prompt_ids`` must list every image of each prompt (eligible or not): N_p counts them.
    Stored with the round before its draw, these π make the round's estimate unbiased however
    they were chosen."""
    outputs = np.asarray(detector_outputs, dtype=np.int64)
    n = outputs.size
    mask = _eligible_mask(n, eligible)
    if not 0.0 <= mix <= 1.0:
        raise ValueError("mix must lie in [0, 1].")
    if budget < 0:
        raise ValueError("The budget must be >= 0.")
    pi = np.zeros(n)
    n_eligible = int(mask.sum())
    if n_eligible == 0 or budget == 0:
        return pi
    budget = min(float(budget), float(n_eligible))
    uniform = budget / n_eligible
    lo = 0.25 * uniform if floor is None else float(floor)
    if lo > uniform + 1e-12:
        raise ValueError(f"A floor of {lo} on {n_eligible} images exceeds the budget {budget}.")
    ids = np.asarray(prompt_ids)
    index = cov_model._prompt_index(ids[mask])
    _, codes = np.unique(ids, return_inverse=True)
    n_p = np.bincount(codes.reshape(-1))[codes.reshape(-1)][mask].astype(float)
    moments = cov_model._moments(index, cov_model._output_index(outputs[mask]), None)
    score = np.sqrt(np.maximum(_quad(cov_model.sensitivity[index], moments), 0.0)) / n_p
    active = _scale_to_budget(score, budget, 0.0)
    mixed = (1 - mix) * active + mix * uniform
    pi[mask] = _scale_to_budget(mixed, budget, lo)
    return pi


def draw_bernoulli(pi: np.ndarray | Sequence[float], seed: Seed) -> np.ndarray:
    """Draw a Bernoulli sample: image i is in with probability π_i, independently (bool array).
    The same π and seed give the same draw."""
    p = np.asarray(pi, dtype=float)
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("Inclusion probabilities must lie in [0, 1].")
    return np.random.default_rng(seed).random(p.shape) < p


# ---------------------------------------------------------------------------------------------
# Power tuning (PPI++)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerTuning:
    """The detector's weight λ (PPI++, Angelopoulos, Duchi & Zrnic 2023), cross-fitted.

    The estimator of the shares becomes μ̂_p(λ) = (1/N_p) Σ_i [λ f_i + c_i ξ_i (Y_i - λ f_i)]:
    unbiased for every fixed λ (λ = 0 is Horvitz-Thompson on the labels alone, λ = 1 the
    untuned estimator). Its delta-method variance for the model score is a quadratic in λ,
    V(λ) = Σ_i v_i (g_i·(Y_i - λ f_i))² (v_i = (1 - π_i)/π_i² with one round, g_i the gradient
    of the image's prompt score over P N_p), minimised at λ* = Σ v (g·Y)(g·f) / Σ v (g·f)²,
    clipped to [0, 1]. Choosing λ on the same labels it is applied to would let it chase the
    sample's noise, so the images are split into ``folds`` fixed in advance (by position) and
    each fold's images get the λ fitted on the labels of the other folds: given those, the
    fold's terms are still unbiased, so the interval needs no correction for the choice.

    ``per_image`` is the λ applied to each image, ``value`` the mean over folds (what is
    reported), ``effective_labels`` = labels x V(0) / V(λ) with V the larger of the
    Horvitz-Thompson and the model-based variance estimates (labels alone would need that
    many labels for the same variance)."""

    per_image: np.ndarray
    value: float
    effective_labels: float


def _power_tuning(data: _Data, model: CovarianceModel, output_index: np.ndarray, folds: int) -> PowerTuning:
    n_labels = int(data.labelled.sum())
    n = data.codes.size
    folds = max(folds, 1)
    lab = data.labelled
    v = data.var_coef
    fold = np.arange(n) % folds
    outputs = output_index

    def gradient(fitted: CovarianceModel) -> np.ndarray:
        # Gradient of each prompt's score from the model's (EM) shares, over N_p: steadier than
        # the AIPW shares' with a few labels a prompt; 0 for a prompt with no clear image.
        with np.errstate(divide="ignore", invalid="ignore"):
            grad = np.nan_to_num(fitted.sensitivity, nan=0.0, posinf=0.0, neginf=0.0)
        return grad[data.codes] / data.n_per_prompt[data.codes, None]  # (n, 2)

    lambdas = np.ones(folds)
    for k in range(folds):
        train = lab & (fold != k) if folds > 1 else lab
        if not train.any():
            continue
        # Everything λ_k rests on -- the gradient's shares too -- comes from the other folds.
        fitted = _fit_model(replace(data, labelled=train), data.f, outputs, 0.5, 0.1) if folds > 1 else model
        g_k = gradient(fitted)[train]
        gy = np.einsum("ij,ij->i", g_k, data.y[train])
        gf = np.einsum("ij,ij->i", g_k, data.f[train])
        den = float((v[train] * gf**2).sum())
        if den > 0:
            lambdas[k] = min(1.0, max(0.0, float((v[train] * gy * gf).sum()) / den))
    per_image = lambdas[fold]
    g = gradient(model)
    gy = np.where(lab, np.einsum("ij,ij->i", g, np.nan_to_num(data.y)), 0.0)
    gf = np.einsum("ij,ij->i", g, data.f)

    def variance(lam: np.ndarray) -> float:
        resid = gy - lam * gf
        ht = float((v * resid**2)[lab].sum())
        moments = model._moments(data.codes, output_index, lam[:, None] * data.f)
        modelled = float((data.design_var * np.einsum("ni,nij,nj->n", g, moments, g)).sum())
        return max(ht, modelled)

    v_now, v_labels = variance(per_image), variance(np.zeros(n))
    # Census (every variance 0): the labels are all there is, λ or not.
    effective = n_labels * v_labels / v_now if v_now > 0 else float(n_labels)
    return PowerTuning(per_image, float(lambdas.mean()), float(effective))


def tune_power(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    detector_outputs: np.ndarray | Sequence[int] | None = None,
    round_weights: Sequence[float] | None = None,
    folds: int = POWER_FOLDS,
) -> PowerTuning:
    """The cross-fitted λ that ``estimate_model_bias`` uses (arguments as there). Needs at least
    one labelled image."""
    data = _prepare(prompt_ids, f, y, xi, pi, round_weights)
    if not data.labelled.any():
        raise ValueError("No labelled image to tune the detector's weight on.")
    outputs = _output_codes(data.f) if detector_outputs is None else np.asarray(detector_outputs, np.int64)
    if outputs.shape != (data.codes.size,):
        raise ValueError("detector_outputs must be one code per image.")
    model = _fit_model(data, data.f, outputs, 0.5, 0.1)
    return _power_tuning(data, model, np.unique(outputs, return_inverse=True)[1].reshape(-1), folds)


# ---------------------------------------------------------------------------------------------
# The public estimate
# ---------------------------------------------------------------------------------------------


def _next_round_labels(
    data: _Data,
    model: CovarianceModel,
    outputs: np.ndarray,
    d: np.ndarray,
    grad: np.ndarray,
    variance: float,
    model_total: float,
    f: np.ndarray,
) -> int | None:
    """Labels a further uniform round over the unlabelled images needs to halve the interval.

    The interval's width scales with the standard error (the bootstrap errors spread like the
    delta method's, and the plug-in's bias shrinks with it), so halving it means a quarter of
    the variance -- an approximation: it projects the delta variance, not the bootstrap. With default weights the new round
    (budget m, planned images left M) gets w = ω_m / (Σ ω_old + ω_m), the old rounds (1 - w),
    so Var(m) = (1 - w)² Var_now + w² V_next(m), V_next(m) = Σ_unlabelled v_i (n_left/m - 1) with
    v_i the model-based per-image variance of the model score, scaled so that the model
    reproduces the variance in use now. Smallest integer m with Var(m) <= Var_now / 4."""
    if variance <= 0:
        return 0
    scored = ~np.isnan(d)
    n_scored = int(scored.sum())
    unlabelled = ~data.labelled & scored[data.codes]
    n_left = int((~data.labelled).sum())
    if n_left == 0:
        return None
    idx = np.flatnonzero(unlabelled)
    v = np.zeros(0)
    if idx.size:
        moments = model._moments(data.codes[idx], model._output_index(outputs[idx]), f[idx])
        v = _quad(grad[data.codes[idx]], moments) / (data.n_per_prompt[data.codes[idx]] ** 2 * n_scored**2)
    scale = variance / model_total if model_total > 0 else 1.0
    total_v = float(v.sum()) * scale
    budgets = data.pi.sum(axis=1)
    planned_left = data.codes.size - budgets.sum()
    left = np.concatenate([[float(data.codes.size)], data.codes.size - np.cumsum(budgets)[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        omega_old = float(np.where(left > budgets, budgets / (left * (left - budgets)), 0.0).sum())

    def projected(m: int) -> float:
        if m >= n_left:
            return 0.0
        plan = max(planned_left, m + 1.0)
        omega = m / (plan * (plan - m))
        w = omega / (omega_old + omega) if omega_old + omega > 0 else 1.0
        return (1 - w) ** 2 * variance + w**2 * total_v * (n_left / m - 1)

    target = variance / 4
    low, high = 0, n_left
    while high - low > 1:
        mid = (low + high) // 2
        if mid > 0 and projected(mid) <= target:
            high = mid
        else:
            low = mid
    return high


def estimate_model_bias(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    detector_outputs: np.ndarray | Sequence[int] | None = None,
    round_weights: Sequence[float] | None = None,
    min_labels: int = MIN_LABELS,
    n_boot: int = 1000,
    seed: Seed = 0,
    power_tuning: bool = True,
    folds: int = POWER_FOLDS,
) -> ModelBiasEstimate:
    """Prediction-powered estimate of a T2I model's bias scores from all its images' detector
    vectors and a Bernoulli sample of human labels (one or several rounds).

    Arguments, one entry per image of the model: ``prompt_ids`` (ints or strings);
    ``f`` (n, 2) detector vectors; ``y`` (n, 2) human vectors, NaN where not labelled (only rows
    with xi = 1 are read); ``xi`` and ``pi`` either (n,) for one round or (rounds, n): the draw
    (drawn and finally labelled) and the inclusion probabilities stored with each round before
    it (0 for images labelled in an earlier round). ``detector_outputs`` are optional integer
    codes (verdict x confidence bin, say) that the variance model conditions on; default one code
    per distinct f. ``round_weights`` override ``default_round_weights`` (must be fixed in
    advance, sum to 1).

    ``n_boot`` design-bootstrap replicates (seeded by ``seed``; 0: the delta intervals) give the
    intervals. ``power_tuning`` weighs the detector by a cross-fitted λ in [0, 1] over ``folds``
    folds of the images; without it λ = 1.

    A drawn image that has no final label yet must be passed as not drawn (xi = 0): the
    estimate then assumes its label is missing at random -- finish a round before reporting it.
    """
    data = _prepare(prompt_ids, f, y, xi, pi, round_weights)
    warnings = list(data.warnings)
    if data.n_prompts == 0:
        empty = ScoreEstimate(None, None, None, None, None, 0, ())
        return ModelBiasEstimate(
            empty, empty, None, {}, 0, 0, data.rounds, tuple(data.weights.tolist()), None, tuple(warnings)
        )
    outputs = _output_codes(data.f) if detector_outputs is None else np.asarray(detector_outputs, np.int64)
    if outputs.shape != (data.codes.size,):
        raise ValueError("detector_outputs must be one code per image.")
    output_index = np.unique(outputs, return_inverse=True)[1].reshape(-1)
    model = _fit_model(data, data.f, outputs, 0.5, 0.1)
    tuning = _power_tuning(data, model, output_index, folds) if power_tuning else None
    # The detector vectors the estimator uses: λ f (λ per fold), or f itself without tuning.
    f_used = data.f if tuning is None else tuning.per_image[:, None] * data.f
    zeros = np.zeros_like(data.f)
    boot_ppi = boot_human = None
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        boot_ppi = _design_bootstrap(
            data, _detector_world(data, model, output_index), [f_used], output_index, n_boot, rng
        )
        # Only θ* is used from the human-only world (posterior interval): no estimator to apply.
        boot_human = _design_bootstrap(data, _human_world(data), [], output_index, n_boot, rng)

    def analyse(
        f_vec: np.ndarray, replicates: _Replicates | None, mode: Literal["pivot", "posterior"]
    ) -> tuple[ScoreEstimate, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        mu, cov = _shares(data, f_vec)
        d, grad = _scores(mu)
        var_ht = _quad(grad, cov)
        moments = model._moments(data.codes, output_index, f_vec)
        per_image = data.design_var * _quad(grad[data.codes], moments)
        var_model = (
            np.bincount(data.codes, weights=per_image, minlength=data.n_prompts) / data.n_per_prompt**2
        )
        d_clipped = _ratio_scores(np.maximum(mu[:, 0], 0.0), np.maximum(mu[:, 1], 0.0))
        score = _model_score(data.keys, d, var_ht, var_model, d_clipped, replicates, mode)
        return score, mu, d, grad, np.maximum(var_ht, var_model), float(var_model[~np.isnan(d)].sum())

    ppi, mu, d, grad, per_prompt, model_total = analyse(f_used, boot_ppi, "pivot")
    human = analyse(zeros, boot_human, "posterior")[0]

    det_d, _ = _scores(_sum_by_prompt(data.codes, data.f, data.n_prompts) / data.n_per_prompt[:, None])
    detector_only = float(np.abs(det_d[~np.isnan(det_d)]).mean()) if (~np.isnan(det_d)).any() else None

    n_labelled = np.bincount(data.codes[data.labelled], minlength=data.n_prompts)
    settled = np.bincount(data.codes, weights=data.design_var, minlength=data.n_prompts) == 0
    prompts: dict[Hashable, PromptEstimate] = {}
    few: list[Hashable] = []
    boot_lo = boot_hi = true_lo = true_hi = None
    if boot_ppi is not None:
        with np.errstate(invalid="ignore"), warnings_module.catch_warnings():
            warnings_module.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no score
            errors = boot_ppi.d_hat[0] - boot_ppi.d_true
            percentile = np.nanpercentile if np.isnan(errors).any() else np.percentile
            boot_lo, boot_hi = percentile(errors, [2.5, 97.5], axis=0)
            true_lo, true_hi = percentile(boot_ppi.d_true, [2.5, 97.5], axis=0)
    d_clipped = _ratio_scores(np.maximum(mu[:, 0], 0.0), np.maximum(mu[:, 1], 0.0))
    for p, key in enumerate(data.keys):
        warning = None
        if n_labelled[p] < min_labels and not settled[p]:
            warning = f"only {int(n_labelled[p])} sampled label(s): the interval rests on the variance model"
            few.append(key)
        shares = (float(mu[p, 0]), float(mu[p, 1]), int(data.n_per_prompt[p]), int(n_labelled[p]))
        if np.isnan(d[p]):
            prompts[key] = PromptEstimate(None, None, None, None, *shares, warning)
            continue
        se = math.sqrt(per_prompt[p])
        delta = (float(d[p] - Z95 * se), float(d[p] + Z95 * se))
        ci = (max(-1.0, delta[0]), min(1.0, delta[1]))
        if (
            boot_lo is not None
            and boot_hi is not None
            and not np.isnan(d_clipped[p])
            and not np.isnan(boot_lo[p])
            and true_lo is not None
            and true_hi is not None
        ):
            ci = (float(max(-1.0, d_clipped[p] - boot_hi[p])), float(min(1.0, d_clipped[p] - boot_lo[p])))
            if not np.isnan(true_lo[p]):
                # The union with the posterior range of the prompt's true score, as for eq. 1.
                ci = (min(ci[0], float(true_lo[p])), max(ci[1], float(true_hi[p])))
        ci = (min(ci), max(ci))
        prompts[key] = PromptEstimate(float(d[p]), ci, se, delta, *shares, warning)
    if few:
        warnings.append(f"{len(few)} prompt(s) have fewer than {min_labels} sampled labels: {_preview(few)}.")
    if ppi.unscored:
        warnings.append(
            f"{len(ppi.unscored)} prompt(s) have no estimated clear image and no score: {_preview(ppi.unscored)}."
        )

    half = None
    if ppi.se is not None:
        half = _next_round_labels(
            data, model, outputs, d, grad, ppi.se**2, model_total / ppi.n_scored**2, f_used
        )
    return ModelBiasEstimate(
        ppi,
        human,
        detector_only,
        prompts,
        int(data.codes.size),
        int(data.labelled.sum()),
        data.rounds,
        tuple(float(w) for w in data.weights),
        half,
        tuple(warnings),
        tuning.value if tuning is not None else 1.0,
        tuning.effective_labels if tuning is not None else None,
    )


def _preview(keys: Sequence[Hashable], limit: int = 5) -> str:
    shown = ", ".join(str(k) for k in keys[:limit])
    return shown + (", ..." if len(keys) > limit else "")


def labels_for_half_width(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    detector_outputs: np.ndarray | Sequence[int] | None = None,
) -> int | None:
    """How many more labels one further round (uniform over the unlabelled images, default
    weights) would need to halve the model score's interval; 0 if it has width 0 already, None
    if undefined. Same arguments as ``estimate_model_bias``, whose result carries the figure."""
    return estimate_model_bias(
        prompt_ids, f, y, xi, pi, detector_outputs=detector_outputs
    ).labels_for_half_width


# ---------------------------------------------------------------------------------------------
# A design bootstrap, the cross-check of the delta method
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile intervals from ``n_resamples`` replicates of the sampling design."""

    model_bias_score: Interval | None
    prompts: Mapping[Hashable, Interval | None]
    n_resamples: int


def bootstrap_model_bias(
    prompt_ids: Sequence[Hashable] | np.ndarray,
    f: np.ndarray | Sequence[Sequence[float]],
    y: np.ndarray | Sequence[Sequence[float]],
    xi: np.ndarray | Sequence[Any],
    pi: np.ndarray | Sequence[Any],
    *,
    round_weights: Sequence[float] | None = None,
    n_resamples: int = 2000,
    seed: Seed = 0,
    level: float = 0.95,
) -> BootstrapIntervals:
    """Percentile intervals of the prompt scores and the model score by a generalised bootstrap
    of the Bernoulli design: each labelled image's term is multiplied by
    a_i = 1 + sqrt(1 - π_i)(E_i - 1), E_i ~ Exp(1) (mean 1, variance 1 - π_i, never negative),
    so the replicates' covariance of μ̂ is exactly the estimate (2). A cross-check of the delta
    method where scores are far from 0; near 0 it shares the plug-in's upward bias."""
    data = _prepare(prompt_ids, f, y, xi, pi, round_weights)
    if data.n_prompts == 0 or n_resamples <= 0:
        return BootstrapIntervals(None, {}, max(n_resamples, 0))
    mu, _ = _shares(data, data.f)
    lab = np.flatnonzero(data.labelled)
    rng = np.random.default_rng(seed)
    r = data.y[lab] - data.f[lab]
    w_at = data.weights[data.round_of[lab]]
    scale = np.sqrt(1 - data.pi_at[lab]) * w_at / data.pi_at[lab]
    mult = scale[None, :] * (rng.exponential(size=(n_resamples, lab.size)) - 1.0)
    onehot = np.zeros((lab.size, data.n_prompts))
    onehot[np.arange(lab.size), data.codes[lab]] = 1.0 / data.n_per_prompt[data.codes[lab]]
    male = mu[:, 0][None, :] + (mult * r[:, 0]) @ onehot
    female = mu[:, 1][None, :] + (mult * r[:, 1]) @ onehot
    clear = male + female
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(clear > _EPS, (male - female) / clear, np.nan)
    tail = (1 - level) / 2 * 100
    prompts: dict[Hashable, Interval | None] = {}
    for p, key in enumerate(data.keys):
        col = d[:, p][~np.isnan(d[:, p])]
        prompts[key] = (
            (float(np.percentile(col, tail)), float(np.percentile(col, 100 - tail))) if col.size else None
        )
    scored = ~np.isnan(d)
    with np.errstate(invalid="ignore"):
        model = np.where(
            scored.any(axis=1), np.nansum(np.abs(d), axis=1) / np.maximum(scored.sum(axis=1), 1), np.nan
        )
    model = model[~np.isnan(model)]
    model_ci = (
        (float(np.percentile(model, tail)), float(np.percentile(model, 100 - tail))) if model.size else None
    )
    return BootstrapIntervals(model_ci, prompts, n_resamples)
