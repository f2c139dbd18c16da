"""The prediction-powered (AIPW) shares of each prompt, their covariance, the prompt scores and the
covariance model of the detector's errors, E[r rᵀ | detector output, prompt]."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

#: A seed for numpy's default_rng: an int or a sequence of ints.
Seed = int | Sequence[int]

#: Per image, the id of its prompt (ints or strings).
PromptIds = Sequence[Hashable] | np.ndarray
#: Per image, a (male, female) vector: (n, 2).
Vectors = np.ndarray | Sequence[Sequence[float]]
#: The draw ξ or the inclusion probabilities π: (n,) for one round, (rounds, n) for several.
RoundArrays = np.ndarray | Sequence[Any]
#: Per image, an integer code of what the detector said.
OutputCodes = np.ndarray | Sequence[int]
#: Two-sided 95 % normal quantile.
Z95 = NormalDist().inv_cdf(0.975)

#: Human classes, in the order of every (.., 3) array here; "rest" = low quality or other.
CLASSES: tuple[str, str, str] = ("male", "female", "rest")
#: The vector of each class, (male, female).
CLASS_VECTORS = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
# Denominators below this count as zero (a prompt without clear images has no score).
_EPS = 1e-12

Interval = tuple[float, float]


# --- Inputs ---------------------------------------------------------------------------------------


def prompt_codes(prompt_ids: PromptIds) -> tuple[tuple[Hashable, ...], np.ndarray]:
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
    """Round weights w_k ∝ n_k / (M_k (M_k - n_k)), fixed by the budgets alone; sum to 1."""
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
class StudyData:
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


@dataclass(frozen=True)
class LabelledSample:
    """The estimator's inputs, one entry per image: prompt ids, detector vectors ``f`` and output
    codes, human vectors ``y`` (NaN where not labelled), and the Bernoulli draw ``xi`` with its
    probabilities ``pi``, (n,) or (rounds, n). Explained in docs/explanation/estimator.md."""

    prompt_ids: PromptIds
    f: Vectors
    y: Vectors
    xi: RoundArrays
    pi: RoundArrays
    detector_outputs: OutputCodes | None = None
    round_weights: Sequence[float] | None = None


def prepare(sample: LabelledSample) -> StudyData:
    """``sample`` checked, with each image's coefficients in the estimate and its variance."""
    keys, codes = prompt_codes(sample.prompt_ids)
    n = codes.size
    f_arr = np.asarray(sample.f, dtype=float).reshape(n, 2) if n else np.zeros((0, 2))
    y_arr = np.asarray(sample.y, dtype=float).reshape(n, 2) if n else np.zeros((0, 2))
    if not np.isfinite(f_arr).all():
        raise ValueError("f must be finite for every image (a failed detector is (0, 0)).")
    xi_arr = _as_rounds(sample.xi, n, "xi", bool)
    pi_arr = _as_rounds(sample.pi, n, "pi", float)
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
    if sample.round_weights is None:
        weights = default_round_weights(pi_arr.sum(axis=1), n)
        # A round that draws every image still unlabelled is complete whatever its planned budget.
        eligible_before = np.ones(n, dtype=bool)
        for k in range(n_rounds):
            row = pi_arr[k][eligible_before]
            if row.size and (row >= 1).all():
                weights = np.zeros(n_rounds)
                weights[k] = 1.0
                break
            eligible_before &= ~xi_arr[k]
    else:
        weights = np.asarray(sample.round_weights, dtype=float)
        if weights.shape != (n_rounds,) or (weights < 0).any() or not math.isclose(weights.sum(), 1.0):
            raise ValueError(f"round_weights must be {n_rounds} non-negative numbers summing to 1.")
    pi_at = np.ones(n)
    if labelled.any():
        pi_at[labelled] = pi_arr[round_of[labelled], np.flatnonzero(labelled)]
    # w_k/π_i for the round that labelled it, plus the weights of all later rounds.
    later = later_weights(weights)
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
    return StudyData(
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


# --- The estimator --------------------------------------------------------------------------------


def later_weights(weights: np.ndarray) -> np.ndarray:
    """Per round, the summed weights of the rounds after it."""
    return np.concatenate([np.cumsum(weights[::-1])[::-1][1:], [0.0]]) if weights.size else np.zeros(0)


def class_counts(data: StudyData, known: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
    """(P, 3) labelled images per prompt and human class, each counted ``weight``."""
    counts = np.zeros((data.n_prompts, 3))
    np.add.at(counts, (data.codes[data.labelled], known[data.labelled]), weight)
    return counts


def sum_by_prompt(codes: np.ndarray, values: np.ndarray, n_prompts: int) -> np.ndarray:
    """Per-prompt sums of the rows of ``values`` (n, ...) -> (P, ...)."""
    flat = values.reshape(values.shape[0], math.prod(values.shape[1:]))
    out = np.stack(
        [np.bincount(codes, weights=flat[:, j], minlength=n_prompts) for j in range(flat.shape[1])],
        axis=1,
    )
    return out.reshape((n_prompts, *values.shape[1:]))


def aipw_shares(data: StudyData, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ̂_p (P, 2) and its estimated covariance (2), (P, 2, 2), for detector vectors ``f``."""
    n_p = np.maximum(data.n_per_prompt, 1.0)
    total = sum_by_prompt(data.codes, f, data.n_prompts)
    cov = np.zeros((data.n_prompts, 2, 2))
    lab = data.labelled
    if lab.any():
        r = data.y[lab] - f[lab]
        codes = data.codes[lab]
        total = total + sum_by_prompt(codes, data.coef[lab, None] * r, data.n_prompts)
        outer = r[:, :, None] * r[:, None, :]
        cov = sum_by_prompt(codes, data.var_coef[lab, None, None] * outer, data.n_prompts)
    return total / n_p[:, None], cov / (n_p**2)[:, None, None]


def scores_and_gradients(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prompt scores d (NaN where μ_m + μ_f <= 0) and their gradients a = (2 μ_f, -2 μ_m)/s²."""
    clear = mu[:, 0] + mu[:, 1]
    ok = clear > _EPS
    safe = np.where(ok, clear, 1.0)
    d = np.where(ok, (mu[:, 0] - mu[:, 1]) / safe, np.nan)
    grad = np.stack([2 * mu[:, 1], -2 * mu[:, 0]], axis=1) / (safe**2)[:, None]
    return d, np.where(ok[:, None], grad, 0.0)


def quad(a: np.ndarray, m: np.ndarray) -> np.ndarray:
    """aᵀ M a row by row: (k, 2) x (k, 2, 2) -> (k,)."""
    return np.einsum("ki,kij,kj->k", a, m, a)


def human_classes(y: np.ndarray) -> np.ndarray:
    """Class index (0 male, 1 female, 2 rest) of human vectors; NaN rows come out as rest."""
    return np.where(y[:, 0] >= 0.5, 0, np.where(y[:, 1] >= 0.5, 1, 2)).astype(np.int64)


def ratio_scores(male: np.ndarray, female: np.ndarray) -> np.ndarray:
    """(m - f)/(m + f) elementwise, NaN where m + f <= 0."""
    clear = male + female
    ok = clear > _EPS
    return np.where(ok, (male - female) / np.where(ok, clear, 1.0), np.nan)


def mean_abs(d: np.ndarray) -> np.ndarray:
    """Eq. 1 along the last axis: mean |d| over defined entries, NaN where none is."""
    ok = ~np.isnan(d)
    count = ok.sum(axis=-1)
    total = np.where(ok, np.abs(d), 0.0).sum(axis=-1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


# --- The covariance model of the detector's errors -----------------------------------------------

#: Pseudo-count of every (human class, detector output) cell of the confusion.
SMOOTHING = 0.5
#: Images' worth of the pooled class shares in each prompt's EM prior.
PRIOR_IMAGES = 0.1


@dataclass(frozen=True)
class CovarianceModel:
    """The detector's confusion, each prompt's class shares, the output vectors and the score gradients."""

    outputs: tuple[int, ...]
    output_vectors: np.ndarray
    likelihood: np.ndarray
    confusion_counts: np.ndarray
    prompt_keys: tuple[Hashable, ...]
    prompt_shares: np.ndarray
    sensitivity: np.ndarray

    def output_index(self, detector_outputs: OutputCodes) -> np.ndarray:
        outs = np.asarray(detector_outputs, dtype=np.int64)
        table = np.asarray(self.outputs, dtype=np.int64)
        index = np.searchsorted(table, outs)
        index = np.minimum(index, len(table) - 1)
        if outs.size and not (table[index] == outs).all():
            raise ValueError("Detector output codes the covariance model has not seen.")
        return index

    def prompt_index(self, prompt_ids: PromptIds) -> np.ndarray:
        lookup = {k: i for i, k in enumerate(self.prompt_keys)}
        keys, codes = prompt_codes(prompt_ids)
        index = np.array([lookup.get(k, -1) for k in keys], dtype=np.int64)
        if (index < 0).any():
            raise ValueError("Prompt ids the covariance model has not seen.")
        return index[codes] if codes.size else codes

    def posterior(self, prompt_index: np.ndarray, output_index: np.ndarray) -> np.ndarray:
        """(n, 3) P(human class | detector output, prompt)."""
        joint = self.likelihood[:, output_index].T * self.prompt_shares[prompt_index]
        return joint / joint.sum(axis=1, keepdims=True)

    def moments_at(
        self, prompt_index: np.ndarray, output_index: np.ndarray, f: np.ndarray | None
    ) -> np.ndarray:
        post = self.posterior(prompt_index, output_index)
        f_arr = self.output_vectors[output_index] if f is None else np.asarray(f, dtype=float)
        diff = CLASS_VECTORS[None, :, :] - f_arr[:, None, :]  # (n, 3 classes, 2)
        return np.einsum("nc,nci,ncj->nij", post, diff, diff)


def _output_codes(f: np.ndarray) -> np.ndarray:
    """One code per distinct detector vector (the default outputs: the verdicts)."""
    if f.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(f, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def detector_codes(data: StudyData, detector_outputs: OutputCodes | None) -> np.ndarray:
    """Each image's detector output code: ``detector_outputs``, else one code per distinct f."""
    outputs = _output_codes(data.f) if detector_outputs is None else np.asarray(detector_outputs, np.int64)
    if outputs.shape != (data.codes.size,):
        raise ValueError("detector_outputs must be one code per image.")
    return outputs


def fit_model(data: StudyData, outputs: np.ndarray) -> CovarianceModel:
    """Confusion from the labelled images (each cell starting at ``SMOOTHING``), then each prompt's
    class shares by EM (``PRIOR_IMAGES`` images' worth of the pooled shares added)."""
    table, out_index = np.unique(outputs, return_inverse=True)
    out_index = out_index.reshape(-1)
    n_out = table.size
    vectors = np.zeros((n_out, 2))
    if n_out:
        vectors = sum_by_prompt(out_index, data.f, n_out) / np.bincount(out_index, minlength=n_out)[:, None]
    counts = np.full((3, max(n_out, 1)), SMOOTHING)
    lab = data.labelled
    known = human_classes(data.y)
    pooled = np.full(3, 1 / 3)
    if lab.any():
        # Weights 1/π rescaled to a mean of 1: counts in units of labels.
        weight = (1.0 / data.pi_at[lab]) / (1.0 / data.pi_at[lab]).mean()
        np.add.at(counts, (known[lab], out_index[lab]), weight)
        # The pooled class shares, with one label's worth of each class so none is ruled out.
        pooled = (np.bincount(known[lab], weights=weight, minlength=3) + 1.0) / (weight.sum() + 3.0)
    likelihood = counts / counts.sum(axis=1, keepdims=True)
    shares = _em_shares(data, likelihood, out_index, known, pooled, PRIOR_IMAGES)
    clear = shares[:, 0] + shares[:, 1]
    sensitivity = np.stack([2 * shares[:, 1], -2 * shares[:, 0]], axis=1) / (clear**2)[:, None]
    return CovarianceModel(
        tuple(int(t) for t in table), vectors, likelihood, counts, data.keys, shares, sensitivity
    )


def output_counts(data: StudyData, output_index: np.ndarray, n_out: int) -> np.ndarray:
    """(P, outputs) unlabelled images per prompt and detector output."""
    lab = data.labelled
    cells = data.codes[~lab] * n_out + output_index[~lab]
    return np.bincount(cells, minlength=data.n_prompts * n_out).reshape(data.n_prompts, n_out)


def _em_shares(
    data: StudyData,
    likelihood: np.ndarray,
    output_index: np.ndarray,
    known: np.ndarray,
    pooled: np.ndarray,
    prior_images: float,
) -> np.ndarray:
    """(P, 3) maximum-likelihood class shares per prompt (EM over counts per prompt and output)."""
    n_prompts, n_out = data.n_prompts, likelihood.shape[1]
    fixed = class_counts(data, known)
    cells = output_counts(data, output_index, n_out)
    # One EM step as two small matrix products over (prompt, output) counts, not a 3-d array.
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


def fit_covariance_model(sample: LabelledSample) -> CovarianceModel:
    """``CovarianceModel`` from the labelled images of ``sample`` so far."""
    data = prepare(sample)
    if not data.labelled.any():
        raise ValueError("No labelled image to learn from: draw the first round uniformly.")
    outputs = detector_codes(data, sample.detector_outputs)
    return fit_model(data, outputs)
