"""Prediction-powered (AIPW) estimates of the paper's bias scores from a sample of human labels
(definitions, derivations and measured coverage: docs/explanation/estimator.md)."""

from __future__ import annotations

import math
import warnings as warnings_module
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from metrics.ppi_bootstrap import Replicates, design_bootstrap, detector_world, human_world
from metrics.ppi_shares import (
    Z95,
    CovarianceModel,
    Interval,
    LabelledSample,
    Seed,
    StudyData,
    aipw_shares,
    detector_codes,
    fit_model,
    mean_abs,
    prepare,
    quad,
    ratio_scores,
    scores_and_gradients,
    sum_by_prompt,
)

#: Prompts with fewer sampled labels than this get a warning (their variance is a guess).
MIN_LABELS = 4


# --- Power tuning (PPI++): the detector's cross-fitted weight λ ----------------------------------

#: Folds of the images for cross-fitting the detector's weight λ.
POWER_FOLDS = 5


@dataclass(frozen=True)
class PowerTuning:
    """The detector's weight λ (PPI++), cross-fitted: per image, its mean, and the effective labels."""

    per_image: np.ndarray
    value: float
    effective_labels: float


def cross_fit_power(
    data: StudyData, model: CovarianceModel, output_index: np.ndarray, folds: int
) -> PowerTuning:
    n_labels = int(data.labelled.sum())
    n = data.codes.size
    folds = max(folds, 1)
    lab = data.labelled
    v = data.var_coef
    fold = np.arange(n) % folds

    def gradient(fitted: CovarianceModel) -> np.ndarray:
        # Gradients from the model's (EM) shares, steadier than the AIPW ones with few labels a prompt.
        with np.errstate(divide="ignore", invalid="ignore"):
            grad = np.nan_to_num(fitted.sensitivity, nan=0.0, posinf=0.0, neginf=0.0)
        return grad[data.codes] / data.n_per_prompt[data.codes, None]  # (n, 2)

    lambdas = np.ones(folds)
    for k in range(folds):
        train = lab & (fold != k) if folds > 1 else lab
        if not train.any():
            continue
        # Everything λ_k rests on -- the gradient's shares too -- comes from the other folds.
        fitted = fit_model(replace(data, labelled=train), output_index) if folds > 1 else model
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
        moments = model.moments_at(data.codes, output_index, lam[:, None] * data.f)
        modelled = float((data.design_var * np.einsum("ni,nij,nj->n", g, moments, g)).sum())
        return max(ht, modelled)

    v_now, v_labels = variance(per_image), variance(np.zeros(n))
    # Census (every variance 0): the labels are all there is, λ or not.
    effective = n_labels * v_labels / v_now if v_now > 0 else float(n_labels)
    return PowerTuning(per_image, float(lambdas.mean()), float(effective))


# --- Results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptEstimate:
    """One prompt's estimated bias score d̂_p (eq. 2 on the AIPW shares), its shares and intervals."""

    estimate: float | None
    ci95: Interval | None
    se: float | None
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
    """A model bias score (eq. 1) with its intervals; all None when no prompt has a score."""

    estimate: float | None
    ci95: Interval | None
    se: float | None
    bias_corrected: float | None
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
    """Everything the estimate reports for one T2I model."""

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
        """The estimate's JSON contract (prompt ids become strings); undefined figures are None."""
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


def _model_score(
    keys: tuple[Hashable, ...],
    d: np.ndarray,
    var_ht: np.ndarray,
    var_model: np.ndarray,
    d_clipped: np.ndarray,
    replicates: Replicates | None,
    mode: Literal["pivot", "posterior"],
) -> ScoreEstimate:
    """Eq. 1 from prompt scores: the plug-in, its delta interval and the bootstrap interval."""
    scored = ~np.isnan(d)
    unscored = tuple(k for k, s in zip(keys, scored, strict=True) if not s)
    n_scored = int(scored.sum())
    if n_scored == 0:
        return ScoreEstimate(None, None, None, None, 0, unscored)
    estimate = float(np.abs(d[scored]).mean())
    variance = max(float(var_ht[scored].sum()), float(var_model[scored].sum())) / n_scored**2
    se = math.sqrt(variance)
    corrected = None
    ci = (max(0.0, estimate - Z95 * se), min(1.0, estimate + Z95 * se))
    clipped = float(mean_abs(d_clipped))
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
            # The point shown beside the interval lies in it.
            corrected = min(max(corrected, ci[0]), ci[1])
    return ScoreEstimate(estimate, ci, se, corrected, n_scored, unscored)


# --- The public estimate --------------------------------------------------------------------------


def _next_round_labels(
    data: StudyData,
    model: CovarianceModel,
    outputs: np.ndarray,
    d: np.ndarray,
    grad: np.ndarray,
    variance: float,
    model_total: float,
    f: np.ndarray,
) -> int | None:
    """Labels one further uniform round needs to halve the interval (docs/explanation/estimator.md)."""
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
        moments = model.moments_at(data.codes[idx], model.output_index(outputs[idx]), f[idx])
        v = quad(grad[data.codes[idx]], moments) / (data.n_per_prompt[data.codes[idx]] ** 2 * n_scored**2)
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
    sample: LabelledSample,
    *,
    min_labels: int = MIN_LABELS,
    n_boot: int = 1000,
    seed: Seed = 0,
    power_tuning: bool = True,
    folds: int = POWER_FOLDS,
) -> ModelBiasEstimate:
    """Prediction-powered estimate of a T2I model's bias scores from its images' detector vectors
    and a (multi-round) Bernoulli sample of human vectors; a drawn image without a final label must
    be passed as not drawn. Arguments explained in docs/explanation/estimator.md."""
    data = prepare(sample)
    warnings = list(data.warnings)
    if data.n_prompts == 0:
        empty = ScoreEstimate(None, None, None, None, 0, ())
        return ModelBiasEstimate(
            empty, empty, None, {}, 0, 0, data.rounds, tuple(data.weights.tolist()), None, tuple(warnings)
        )
    outputs = detector_codes(data, sample.detector_outputs)
    output_index = np.unique(outputs, return_inverse=True)[1].reshape(-1)
    model = fit_model(data, outputs)
    tuning = cross_fit_power(data, model, output_index, folds) if power_tuning else None
    # The detector vectors the estimator uses: λ f (λ per fold), or f itself without tuning.
    f_used = data.f if tuning is None else tuning.per_image[:, None] * data.f
    zeros = np.zeros_like(data.f)
    boot_ppi = boot_human = None
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        boot_ppi = design_bootstrap(
            data, detector_world(data, model, output_index), [f_used], output_index, n_boot, rng
        )
        # Only θ* is used from the human-only world (posterior interval): no estimator to apply.
        boot_human = design_bootstrap(data, human_world(data), [], output_index, n_boot, rng)

    def analyse(
        f_vec: np.ndarray, replicates: Replicates | None, mode: Literal["pivot", "posterior"]
    ) -> tuple[ScoreEstimate, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        mu, cov = aipw_shares(data, f_vec)
        d, grad = scores_and_gradients(mu)
        var_ht = quad(grad, cov)
        moments = model.moments_at(data.codes, output_index, f_vec)
        per_image = data.design_var * quad(grad[data.codes], moments)
        var_model = (
            np.bincount(data.codes, weights=per_image, minlength=data.n_prompts) / data.n_per_prompt**2
        )
        d_clipped = ratio_scores(np.maximum(mu[:, 0], 0.0), np.maximum(mu[:, 1], 0.0))
        score = _model_score(data.keys, d, var_ht, var_model, d_clipped, replicates, mode)
        return score, mu, d, grad, np.maximum(var_ht, var_model), float(var_model[~np.isnan(d)].sum())

    ppi, mu, d, grad, per_prompt, model_total = analyse(f_used, boot_ppi, "pivot")
    human = analyse(zeros, boot_human, "posterior")[0]

    det_d, _ = scores_and_gradients(
        sum_by_prompt(data.codes, data.f, data.n_prompts) / data.n_per_prompt[:, None]
    )
    detector_only = float(np.abs(det_d[~np.isnan(det_d)]).mean()) if (~np.isnan(det_d)).any() else None

    n_labelled = np.bincount(data.codes[data.labelled], minlength=data.n_prompts)
    settled = np.bincount(data.codes, weights=data.design_var, minlength=data.n_prompts) == 0
    prompts: dict[Hashable, PromptEstimate] = {}
    few: list[Hashable] = []
    # Per prompt, the 2.5 and 97.5 % points of the bootstrap errors and of the true scores.
    bands: np.ndarray | None = None
    if boot_ppi is not None:
        with np.errstate(invalid="ignore"), warnings_module.catch_warnings():
            warnings_module.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no score
            errors = boot_ppi.d_hat[0] - boot_ppi.d_true
            percentile = np.nanpercentile if np.isnan(errors).any() else np.percentile
            bands = np.concatenate(
                [percentile(errors, [2.5, 97.5], axis=0), percentile(boot_ppi.d_true, [2.5, 97.5], axis=0)]
            )
    d_clipped = ratio_scores(np.maximum(mu[:, 0], 0.0), np.maximum(mu[:, 1], 0.0))
    for p, key in enumerate(data.keys):
        warning = None
        if n_labelled[p] < min_labels and not settled[p]:
            warning = f"only {int(n_labelled[p])} sampled label(s): the interval rests on the variance model"
            few.append(key)
        counts = (int(data.n_per_prompt[p]), int(n_labelled[p]))
        if np.isnan(d[p]):
            prompts[key] = PromptEstimate(None, None, None, *counts, warning)
            continue
        se = math.sqrt(per_prompt[p])
        ci = (max(-1.0, float(d[p] - Z95 * se)), min(1.0, float(d[p] + Z95 * se)))
        if bands is not None and not np.isnan(d_clipped[p]) and not np.isnan(bands[0, p]):
            boot_lo, boot_hi, true_lo, true_hi = bands[:, p]
            ci = (float(max(-1.0, d_clipped[p] - boot_hi)), float(min(1.0, d_clipped[p] - boot_lo)))
            if not np.isnan(true_lo):
                # The union with the posterior range of the prompt's true score, as for eq. 1.
                ci = (min(ci[0], float(true_lo)), max(ci[1], float(true_hi)))
        ci = (min(ci), max(ci))
        prompts[key] = PromptEstimate(float(d[p]), ci, se, *counts, warning)
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
