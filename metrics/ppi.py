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
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from metrics.ppi_bootstrap import Replicates, design_bootstrap, detector_world, human_world
from metrics.ppi_model import CovarianceModel, detector_codes, fit_model
from metrics.ppi_power import POWER_FOLDS, cross_fit_power
from metrics.ppi_shares import (
    Z95,
    Interval,
    OutputCodes,
    PromptIds,
    RoundArrays,
    Seed,
    StudyData,
    Vectors,
    aipw_shares,
    mean_abs,
    prepare,
    quad,
    ratio_scores,
    scores_and_gradients,
    sum_by_prompt,
)

#: Prompts with fewer sampled labels than this get a warning (their variance is a guess).
MIN_LABELS = 4


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


def _model_score(
    keys: tuple[Hashable, ...],
    d: np.ndarray,
    var_ht: np.ndarray,
    var_model: np.ndarray,
    d_clipped: np.ndarray,
    replicates: Replicates | None,
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
            # The point shown beside the interval lies in it (clipping at 0 or 1, or a skewed
            # error distribution, could otherwise put the mean error's correction outside).
            corrected = min(max(corrected, ci[0]), ci[1])
    return ScoreEstimate(estimate, ci, se, corrected, delta, n_scored, unscored)


# ---------------------------------------------------------------------------------------------
# The public estimate
# ---------------------------------------------------------------------------------------------


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
    prompt_ids: PromptIds,
    f: Vectors,
    y: Vectors,
    xi: RoundArrays,
    pi: RoundArrays,
    *,
    detector_outputs: OutputCodes | None = None,
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
    data = prepare(prompt_ids, f, y, xi, pi, round_weights)
    warnings = list(data.warnings)
    if data.n_prompts == 0:
        empty = ScoreEstimate(None, None, None, None, None, 0, ())
        return ModelBiasEstimate(
            empty, empty, None, {}, 0, 0, data.rounds, tuple(data.weights.tolist()), None, tuple(warnings)
        )
    outputs = detector_codes(data, detector_outputs)
    output_index = np.unique(outputs, return_inverse=True)[1].reshape(-1)
    model = fit_model(data, data.f, outputs, 0.5, 0.1)
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
    boot_lo = boot_hi = true_lo = true_hi = None
    if boot_ppi is not None:
        with np.errstate(invalid="ignore"), warnings_module.catch_warnings():
            warnings_module.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no score
            errors = boot_ppi.d_hat[0] - boot_ppi.d_true
            percentile = np.nanpercentile if np.isnan(errors).any() else np.percentile
            boot_lo, boot_hi = percentile(errors, [2.5, 97.5], axis=0)
            true_lo, true_hi = percentile(boot_ppi.d_true, [2.5, 97.5], axis=0)
    d_clipped = ratio_scores(np.maximum(mu[:, 0], 0.0), np.maximum(mu[:, 1], 0.0))
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
    prompt_ids: PromptIds,
    f: Vectors,
    y: Vectors,
    xi: RoundArrays,
    pi: RoundArrays,
    *,
    detector_outputs: OutputCodes | None = None,
) -> int | None:
    """How many more labels one further round (uniform over the unlabelled images, default
    weights) would need to halve the model score's interval; 0 if it has width 0 already, None
    if undefined. Same arguments as ``estimate_model_bias``, whose result carries the figure."""
    return estimate_model_bias(
        prompt_ids, f, y, xi, pi, detector_outputs=detector_outputs
    ).labels_for_half_width
