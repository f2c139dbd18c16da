"""Tests of metrics.ppi: the prediction-powered (AIPW) estimator.

Oracles: hand-worked examples; exact enumeration of every Bernoulli sample of small
populations (expectations and variances without simulation error); the paper's own bias-score
functions (metrics.gender) where every image is labelled; ``ppi-python`` (the authors'
reference implementation of prediction-powered inference, a dev dependency) for the point
estimate and the interval with its documented settings (lam=1: plain PPI, no power tuning); and
a coverage simulation with balanced prompts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest

from metrics import gender as paper
from metrics import ppi, ppi_bootstrap, ppi_design, ppi_shares
from metrics.ppi_shares import LabelledSample

NAN = np.nan
MALE, FEMALE, REST = (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)

# A detector with five outputs (male sure / unsure, female sure / unsure, filtered), roughly as
# accurate as FairFace in the paper's Table 3: P(output | human class) per row.
LIKELIHOOD = np.array(
    [
        [0.86, 0.113, 0.003, 0.008, 0.016],  # human male
        [0.02, 0.08, 0.74, 0.14, 0.02],  # human female
        [0.07, 0.12, 0.03, 0.06, 0.72],  # human low quality / other
    ]
)
OUTPUT_VECTORS = np.array([MALE, MALE, FEMALE, FEMALE, REST])


def simulate_population(
    rng: np.random.Generator, scores: np.ndarray, n_per_prompt: int, low_quality: float = 0.125
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prompt ids, detector vectors, human vectors and detector output codes of a population
    whose prompts have the given true bias scores (male share among clear = (1 + d)/2)."""
    n_prompts = len(scores)
    codes = np.repeat(np.arange(n_prompts), n_per_prompt)
    male_share = (1 + np.asarray(scores)[codes]) / 2
    clear = rng.random(codes.size) >= low_quality
    human = np.where(clear, np.where(rng.random(codes.size) < male_share, 0, 1), 2)
    outputs = (rng.random(codes.size)[:, None] > LIKELIHOOD.cumsum(axis=1)[human]).sum(axis=1)
    outputs = np.minimum(outputs, 4)
    return codes, OUTPUT_VECTORS[outputs], ppi_shares.CLASS_VECTORS[human], outputs


def true_model_score(codes: np.ndarray, y: np.ndarray) -> float:
    """Eq. 1 on every image's human label (the paper's own functions)."""
    keys = np.unique(codes)
    scores = {
        int(k): paper.prompt_bias_score(int(y[codes == k, 0].sum()), int(y[codes == k, 1].sum()))
        for k in keys
    }
    value = paper.model_bias_score(scores).value
    assert value is not None
    return value


@dataclass(frozen=True)
class PromptShares:
    keys: tuple
    shares: np.ndarray
    cov: np.ndarray
    n_images: np.ndarray
    n_labelled: np.ndarray


def prompt_shares(sample: LabelledSample) -> PromptShares:
    """The AIPW shares μ̂_p and their covariance estimate (2) per prompt, as the estimator computes them."""
    data = ppi_shares.prepare(sample)
    mu, cov = ppi_shares.aipw_shares(data, data.f)
    n_labelled = np.bincount(data.codes[data.labelled], minlength=data.n_prompts)
    return PromptShares(data.keys, mu, cov, data.n_per_prompt.astype(np.int64), n_labelled)


def tune_power(sample: LabelledSample) -> ppi.PowerTuning:
    """The cross-fitted λ that ``estimate_model_bias`` uses."""
    data = ppi_shares.prepare(sample)
    outputs = ppi_shares.detector_codes(data, sample.detector_outputs)
    model = ppi_shares.fit_model(data, outputs)
    index = np.unique(outputs, return_inverse=True)[1].reshape(-1)
    return ppi.cross_fit_power(data, model, index, ppi.POWER_FOLDS)


def multiplier_bootstrap(
    sample: LabelledSample, *, n_resamples: int, seed: int
) -> dict[object, tuple[float, float] | None]:
    """Per prompt, the 95 % percentile interval of its score from a multiplier bootstrap of the
    Bernoulli design (exponential weights on the sampled residuals): an independent cross-check."""
    data = ppi_shares.prepare(sample)
    mu, _ = ppi_shares.aipw_shares(data, data.f)
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
    d = ppi_shares.ratio_scores(male, female)
    out: dict[object, tuple[float, float] | None] = {}
    for p, key in enumerate(data.keys):
        values = d[:, p][~np.isnan(d[:, p])]
        out[key] = (
            (float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))) if values.size else None
        )
    return out


def observed(y: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Human vectors as the estimator sees them: NaN where not labelled."""
    labelled = xi if xi.ndim == 1 else xi.any(axis=0)
    return np.where(labelled[:, None], y, NAN)


# --------------------------------------------------------------------------------------------
# Hand-worked example
# --------------------------------------------------------------------------------------------

# Prompt "a": four images, π = 1/2 each; images 0 and 2 drawn. Image 0: detector and human say
# male (residual 0). Image 2: detector female, human male (residual (1, -1)).
# Prompt "b": two images, both drawn with π = 1; image 1: detector female, human male.
HAND_PROMPTS = ["a", "a", "a", "a", "b", "b"]
HAND_F = np.array([MALE, MALE, FEMALE, REST, MALE, FEMALE])
HAND_Y = np.array([MALE, [NAN, NAN], MALE, [NAN, NAN], MALE, MALE])
HAND_XI = np.array([1, 0, 1, 0, 1, 1], dtype=bool)
HAND_PI = np.array([0.5, 0.5, 0.5, 0.5, 1.0, 1.0])


def test_shares_and_covariance_reproduce_the_hand_computation():
    # a: μ̂ = (1/4)[Σ f + r_0/π + r_2/π] = (1/4)[(2, 1) + (0, 0) + (2, -2)] = (1, -1/4);
    #    Ĉov = (1/16)(1 - π)/π² r_2 r_2ᵀ = (1/8)[[1, -1], [-1, 1]].
    # b: μ̂ = (1/2)[(1, 1) + (1, -1)] = (1, 0), no variance (π = 1).
    shares = prompt_shares(LabelledSample(HAND_PROMPTS, HAND_F, HAND_Y, HAND_XI, HAND_PI))
    assert shares.keys == ("a", "b")
    np.testing.assert_allclose(shares.shares, [[1.0, -0.25], [1.0, 0.0]])
    np.testing.assert_allclose(shares.cov[0], [[0.125, -0.125], [-0.125, 0.125]])
    np.testing.assert_allclose(shares.cov[1], np.zeros((2, 2)))
    assert shares.n_images.tolist() == [4, 2]
    assert shares.n_labelled.tolist() == [2, 2]


def test_scores_reproduce_the_hand_computation_unclipped():
    result = ppi.estimate_model_bias(
        LabelledSample(HAND_PROMPTS, HAND_F, HAND_Y, HAND_XI, HAND_PI), n_boot=200
    )
    # d̂_a = (1 + 1/4)/(1 - 1/4) = 5/3: the plug-in is not clipped to [-1, 1].
    assert result.prompts["a"].estimate == pytest.approx(5 / 3)
    assert result.prompts["b"].estimate == pytest.approx(1.0)
    assert result.model_bias_score.estimate == pytest.approx((5 / 3 + 1) / 2)
    # Human only (f = 0, HT): a = (1/4)(1/π + 1/π)(1, 0) = (1, 0) -> 1; b -> 1.
    assert result.human_only.estimate == pytest.approx(1.0)
    # Detector only: a has 2 male, 1 female verdicts -> 1/3; b has 1 and 1 -> 0.
    assert result.detector_only == pytest.approx(1 / 6)
    # Delta method for a: gradient (2 μ_f, -2 μ_m)/(μ_m + μ_f)² = (-0.5, -2)/0.5625, so the
    # HT variance is (1/8)(a_0 - a_1)² = 8/9; the reported se never falls below it.
    assert result.prompts["a"].se >= math.sqrt(8 / 9) - 1e-12
    lo, hi = result.model_bias_score.ci95
    assert 0.0 <= lo <= hi <= 1.0
    assert result.n_images == 6
    assert result.n_labelled == 4
    assert result.rounds == 1


def test_prompt_with_fewer_than_four_labels_gets_a_warning_not_a_silently_tiny_interval():
    result = ppi.estimate_model_bias(
        LabelledSample(HAND_PROMPTS, HAND_F, HAND_Y, HAND_XI, HAND_PI), n_boot=200
    )
    assert result.prompts["a"].warning is not None
    # Prompt b is fully labelled with certainty: nothing to warn about.
    assert result.prompts["b"].warning is None
    assert any("fewer than 4 sampled labels" in w for w in result.warnings)


def test_prompt_whose_labels_show_no_error_still_gets_a_positive_standard_error():
    # Two labels, both agreeing with the detector: the HT variance (2) is exactly 0, but the
    # prompt's true variance is not (its other 18 images may hide errors).
    prompts = ["p"] * 20
    f = np.array([MALE] * 15 + [REST] * 5)
    y = np.full((20, 2), NAN)
    xi = np.zeros(20, dtype=bool)
    xi[[0, 1]] = True
    y[[0, 1]] = MALE
    pi = np.full(20, 0.1)
    assert prompt_shares(LabelledSample(prompts, f, y, xi, pi)).cov[0].max() == 0.0
    result = ppi.estimate_model_bias(LabelledSample(prompts, f, y, xi, pi), n_boot=200)
    assert result.prompts["p"].se > 0.0
    assert result.prompts["p"].warning is not None


# --------------------------------------------------------------------------------------------
# Budget = all images
# --------------------------------------------------------------------------------------------


def test_labelling_every_image_with_probability_one_gives_exactly_the_human_scores():
    rng = np.random.default_rng(1)
    codes, f, y, outputs = simulate_population(rng, np.array([1.0, 0.4, 0.0, -0.6, 0.9]), 12)
    xi = np.ones(codes.size, dtype=bool)
    pi = np.ones(codes.size)
    result = ppi.estimate_model_bias(
        LabelledSample(codes, f, y, xi, pi, detector_outputs=outputs), n_boot=100
    )
    truth = true_model_score(codes, y)
    assert result.model_bias_score.estimate == pytest.approx(truth, abs=1e-12)
    assert result.model_bias_score.ci95 == pytest.approx((truth, truth), abs=1e-12)
    assert result.model_bias_score.se == 0.0
    assert result.human_only.estimate == pytest.approx(truth, abs=1e-12)
    assert result.human_only.ci95 == pytest.approx((truth, truth), abs=1e-12)
    for k, estimate in result.prompts.items():
        mask = codes == k
        expected = paper.prompt_bias_score(int(y[mask, 0].sum()), int(y[mask, 1].sum()))
        assert estimate.estimate == pytest.approx(expected, abs=1e-12)
        assert estimate.ci95 == pytest.approx((expected, expected), abs=1e-12)
        assert estimate.warning is None
    assert result.labels_for_half_width == 0


def test_a_second_round_that_labels_every_remaining_image_gives_the_exact_human_score():
    rng = np.random.default_rng(2)
    codes, f, y, outputs = simulate_population(rng, np.array([1.0, 0.2, -0.3, 0.7]), 15)
    pi1 = ppi_design.inclusion_probabilities_uniform(codes.size, 12)
    xi1 = ppi_design.draw_bernoulli(pi1, 3)
    pi2 = ppi_design.inclusion_probabilities_uniform(codes.size, codes.size, eligible=~xi1)
    xi2 = ppi_design.draw_bernoulli(pi2, 4)
    assert (xi1 | xi2).all()
    result = ppi.estimate_model_bias(
        LabelledSample(codes, f, y, np.stack([xi1, xi2]), np.stack([pi1, pi2]), detector_outputs=outputs),
        n_boot=100,
    )
    assert result.round_weights == (0.0, 1.0)
    assert result.model_bias_score.estimate == pytest.approx(true_model_score(codes, y), abs=1e-12)


# --------------------------------------------------------------------------------------------
# Exact enumeration over every Bernoulli sample
# --------------------------------------------------------------------------------------------


def test_estimate_is_unbiased_and_variance_formula_exact_over_every_bernoulli_sample():
    f = np.array([MALE, MALE, FEMALE, REST, FEMALE, MALE])
    y = np.array([MALE, FEMALE, FEMALE, MALE, REST, REST])
    pi = np.array([0.2, 0.5, 0.9, 0.3, 0.7, 0.6])
    n = len(pi)
    mu = y.mean(axis=0)
    r = y - f
    true_cov = sum((1 - p) / p * np.outer(ri, ri) for p, ri in zip(pi, r, strict=True)) / n**2
    mean = np.zeros(2)
    second = np.zeros((2, 2))
    mean_cov_estimate = np.zeros((2, 2))
    total_probability = 0.0
    for pattern in itertools.product([False, True], repeat=n):
        xi = np.array(pattern)
        probability = float(np.prod(np.where(xi, pi, 1 - pi)))
        shares = prompt_shares(LabelledSample(["p"] * n, f, observed(y, xi), xi, pi))
        mean += probability * shares.shares[0]
        second += probability * np.outer(shares.shares[0] - mu, shares.shares[0] - mu)
        mean_cov_estimate += probability * shares.cov[0]
        total_probability += probability
    assert total_probability == pytest.approx(1.0)
    np.testing.assert_allclose(mean, mu, atol=1e-12)  # E μ̂ = μ
    np.testing.assert_allclose(second, true_cov, atol=1e-12)  # Var μ̂ = formula (1)
    np.testing.assert_allclose(mean_cov_estimate, true_cov, atol=1e-12)  # E (2) = (1)


def test_two_rounds_stay_unbiased_when_the_second_design_depends_on_the_first_labels():
    f = np.array([MALE, MALE, FEMALE, REST, FEMALE])
    y = np.array([MALE, FEMALE, FEMALE, MALE, MALE])
    n = len(f)
    mu = y.mean(axis=0)
    pi1 = np.full(n, 0.4)
    weights = (0.3, 0.7)  # fixed in advance
    mean = np.zeros(2)
    var = np.zeros((2, 2))
    mean_cov_estimate = np.zeros((2, 2))
    for first in itertools.product([False, True], repeat=n):
        xi1 = np.array(first)
        p1 = float(np.prod(np.where(xi1, pi1, 1 - pi1)))
        # An "active" second round: if round 1 found a detector error, look harder at the
        # images the detector filtered or called female; its budget depends on the labels too.
        found_error = bool((np.abs(y - f)[xi1] > 0).any())
        pi2 = np.where(xi1, 0.0, 0.25)
        if found_error:
            pi2 = np.where(~xi1 & (f[:, 0] == 0), 0.9, pi2)
        remaining = np.flatnonzero(~xi1)
        for second in itertools.product([False, True], repeat=remaining.size):
            xi2 = np.zeros(n, dtype=bool)
            xi2[remaining] = second
            p2 = float(np.prod(np.where(xi2[remaining], pi2[remaining], 1 - pi2[remaining])))
            xi = np.stack([xi1, xi2])
            shares = prompt_shares(
                LabelledSample(["p"] * n, f, observed(y, xi), xi, np.stack([pi1, pi2]), round_weights=weights)
            )
            est = shares.shares[0]
            mean += p1 * p2 * est
            var += p1 * p2 * np.outer(est - mu, est - mu)
            mean_cov_estimate += p1 * p2 * shares.cov[0]
    np.testing.assert_allclose(mean, mu, atol=1e-12)
    # The round errors are martingale differences: Σ_k w_k² (2)_k is unbiased for the variance.
    np.testing.assert_allclose(mean_cov_estimate, var, atol=1e-12)


def test_default_round_weights_follow_the_budgets_and_a_complete_round_takes_all():
    np.testing.assert_allclose(
        ppi_shares.default_round_weights([100, 300], 1_000_000), [0.25, 0.75], atol=1e-3
    )
    # w ∝ n_k / (M_k (M_k - n_k)): 100/(4000 * 3900) and 300/(3900 * 3600).
    w = ppi_shares.default_round_weights([100, 300], 4000)
    expected = np.array([100 / (4000 * 3900), 300 / (3900 * 3600)])
    np.testing.assert_allclose(w, expected / expected.sum())
    assert ppi_shares.default_round_weights([100, 3900], 4000).tolist() == [0.0, 1.0]
    assert ppi_shares.default_round_weights([], 10).size == 0


# --------------------------------------------------------------------------------------------
# The reference implementation (ppi-python)
# --------------------------------------------------------------------------------------------


def _one_prompt_with_exact_sample_size(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, n_labelled = 200, 50
    _, f, y, _ = simulate_population(rng, np.array([0.3]), n)
    xi = np.zeros(n, dtype=bool)
    xi[rng.choice(n, n_labelled, replace=False)] = True
    return f, y, xi, np.full(n, n_labelled / n)


def test_point_estimate_matches_ppi_python_with_lam_1():
    ppi_py = pytest.importorskip("ppi_py")
    f, y, xi, pi = _one_prompt_with_exact_sample_size(7)
    ours = prompt_shares(LabelledSample(["p"] * len(f), f, observed(y, xi), xi, pi)).shares[0]
    # With the realised sample size equal to Σ π, (1/N)Σ ξ r/π is the sample mean of r: ppi's
    # rectifier, with all N detector vectors as its "unlabelled" data.
    for j in range(2):
        theirs = ppi_py.ppi_mean_pointestimate(y[xi, j], f[xi, j], f[:, j], lam=1)
        assert ours[j] == pytest.approx(float(np.squeeze(theirs)), abs=1e-12)


def test_interval_matches_ppi_python_up_to_the_finite_population_terms():
    ppi_py = pytest.importorskip("ppi_py")
    f, y, xi, pi = _one_prompt_with_exact_sample_size(8)
    n_all, n = len(f), int(xi.sum())
    shares = prompt_shares(LabelledSample(["p"] * n_all, f, observed(y, xi), xi, pi))
    fraction = n / n_all
    for j in range(2):
        lo, hi = ppi_py.ppi_mean_ci(y[xi, j], f[xi, j], f[:, j], alpha=0.05, lam=1)
        theirs_var = ((float(np.squeeze(hi)) - float(np.squeeze(lo))) / 2 / ppi_shares.Z95) ** 2
        # ppi-python (superpopulation, labelled sample iid): Var f / N + Var r / n. Ours
        # (finite population, Bernoulli design): (1 - n/N) mean(r²) / n. Remove Var f / N,
        # uncentre the residual variance, apply the finite-population factor: equal.
        r = y[xi, j] - f[xi, j]
        expected = (1 - fraction) * (theirs_var - f[:, j].var() / n_all + r.mean() ** 2 / n)
        assert shares.cov[0][j, j] == pytest.approx(expected, rel=1e-9)


# --------------------------------------------------------------------------------------------
# Designs
# --------------------------------------------------------------------------------------------


def test_uniform_design_spreads_the_budget_over_eligible_images():
    pi = ppi_design.inclusion_probabilities_uniform(10, 4)
    np.testing.assert_allclose(pi, 0.4)
    eligible = np.array([True] * 5 + [False] * 5)
    pi = ppi_design.inclusion_probabilities_uniform(10, 4, eligible=eligible)
    np.testing.assert_allclose(pi, [0.8] * 5 + [0.0] * 5)
    assert ppi_design.inclusion_probabilities_uniform(10, 50).tolist() == [1.0] * 10


def _fitted_model(seed: int = 0) -> tuple[np.ndarray, np.ndarray, ppi_shares.CovarianceModel]:
    rng = np.random.default_rng(seed)
    codes, f, y, outputs = simulate_population(rng, np.array([1.0, 0.0, 0.5, -0.5, 0.9, 0.2]), 60)
    pi = ppi_design.inclusion_probabilities_uniform(codes.size, 120)
    xi = ppi_design.draw_bernoulli(pi, seed)
    model = ppi_shares.fit_covariance_model(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs)
    )
    return codes, outputs, model


def test_covariance_model_learns_the_detector_confusion():
    _, _, model = _fitted_model()
    assert model.outputs == (0, 1, 2, 3, 4)
    np.testing.assert_allclose(model.likelihood.sum(axis=1), 1.0)
    # Each human class's most likely output is the right one.
    assert model.likelihood.argmax(axis=1).tolist() == [0, 2, 4]
    post = model.posterior(model.prompt_index([0, 1]), model.output_index([1, 1]))
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    # "Unsure male" on the all-male prompt 0 is surely male; on the balanced prompt 1 less so.
    assert post[0, 0] > post[1, 0]


def test_active_design_spends_the_budget_on_uncertain_and_sensitive_images():
    codes, outputs, model = _fitted_model()
    budget = 90.0
    pi = ppi_design.inclusion_probabilities_active(outputs, codes, model, budget, mix=0.2)
    assert pi.sum() == pytest.approx(budget)
    assert pi.max() <= 1.0
    assert pi.min() >= 0.25 * budget / codes.size - 1e-12
    # The unsure outputs (1: male, 3: female) get more than the sure ones (0, 2).
    by_output = [pi[outputs == o].mean() for o in range(5)]
    assert by_output[1] > 2 * by_output[0]
    assert by_output[3] > 2 * by_output[2]
    # Neyman allocation without mix and floor: π ∝ sqrt(a_pᵀ E[r rᵀ] a_p) / N_p exactly.
    pure = ppi_design.inclusion_probabilities_active(outputs, codes, model, 30.0, mix=0.0, floor=0.0)
    moments = model.moments_at(model.prompt_index(codes), model.output_index(outputs), None)
    a = model.sensitivity[codes]
    want = np.sqrt(np.einsum("ni,nij,nj->n", a, moments, a)) / 60
    assert pure.max() < 1.0
    np.testing.assert_allclose(pure / pure.sum(), want / want.sum(), rtol=1e-6)


def test_active_design_with_full_mix_is_uniform_and_respects_eligibility():
    codes, outputs, model = _fitted_model()
    eligible = np.arange(codes.size) % 3 != 0
    pi = ppi_design.inclusion_probabilities_active(outputs, codes, model, 40.0, mix=1.0, eligible=eligible)
    np.testing.assert_allclose(pi[eligible], 40.0 / eligible.sum())
    assert (pi[~eligible] == 0).all()
    with pytest.raises(ValueError, match="floor"):
        ppi_design.inclusion_probabilities_active(outputs, codes, model, 10.0, floor=0.5)


def test_bernoulli_draw_is_reproducible_and_has_the_right_frequencies():
    pi = np.array([0.0, 0.1, 0.5, 0.9, 1.0] * 20_000)
    first = ppi_design.draw_bernoulli(pi, 42)
    assert (first == ppi_design.draw_bernoulli(pi, 42)).all()
    assert not (first == ppi_design.draw_bernoulli(pi, 43)).all()
    freq = first.reshape(-1, 5).mean(axis=0)
    np.testing.assert_allclose(freq, [0.0, 0.1, 0.5, 0.9, 1.0], atol=0.01)


# --------------------------------------------------------------------------------------------
# Cross-checks of the intervals
# --------------------------------------------------------------------------------------------


def test_design_bootstrap_agrees_with_the_delta_method_for_a_strongly_biased_prompt():
    rng = np.random.default_rng(5)
    codes, f, y, _ = simulate_population(rng, np.array([0.6]), 2000)
    pi = np.full(codes.size, 0.3)
    xi = ppi_design.draw_bernoulli(pi, 6)
    shares = prompt_shares(LabelledSample(codes, f, observed(y, xi), xi, pi))
    m, fe = shares.shares[0]
    grad = np.array([2 * fe, -2 * m]) / (m + fe) ** 2
    d = (m - fe) / (m + fe)
    se = math.sqrt(grad @ shares.cov[0] @ grad)
    boot = multiplier_bootstrap(LabelledSample(codes, f, observed(y, xi), xi, pi), n_resamples=4000, seed=1)
    lo, hi = boot[0]
    assert lo == pytest.approx(d - ppi_shares.Z95 * se, abs=0.1 * se)
    assert hi == pytest.approx(d + ppi_shares.Z95 * se, abs=0.1 * se)


def test_aipw_share_interval_covers_95_percent_over_2000_simulated_designs():
    # Vectorised over designs: one population of 3000 images, 2000 Bernoulli samples with
    # π = 0.3, the normal interval from formula (2) for each share. (With only a handful of
    # detector errors in the sample, (2) is too noisy for a normal interval: that is what the
    # bootstrap of estimate_model_bias is for.)
    rng = np.random.default_rng(9)
    _, f, y, _ = simulate_population(rng, np.array([0.2]), 3000)
    n = len(f)
    pi = 0.3
    xi = (rng.random((2000, n)) < pi).astype(np.float32)
    r = y - f
    est = f.mean(axis=0) + xi @ r / (n * pi)
    var = xi @ r**2 * (1 - pi) / pi**2 / n**2
    covered = np.abs(est - y.mean(axis=0)) <= ppi_shares.Z95 * np.sqrt(var)
    assert covered.mean(axis=0) == pytest.approx([0.95, 0.95], abs=0.02)


def _coverage_study(rng: np.random.Generator, seed: int, design: str) -> tuple[bool, bool, float]:
    # 8 prompts x 25 images, half of them balanced (true score 0, where |·| is not smooth).
    codes, f, y, outputs = simulate_population(rng, np.array([0, 0, 0, 0, 1.0, 0.6, -0.5, 0.8]), 25)
    truth = true_model_score(codes, y)
    n = codes.size
    if design == "uniform":
        pi = ppi_design.inclusion_probabilities_uniform(n, 60)
        xi = ppi_design.draw_bernoulli(pi, seed)
    else:
        pi1 = ppi_design.inclusion_probabilities_uniform(n, 20)
        xi1 = ppi_design.draw_bernoulli(pi1, seed)
        model = ppi_shares.fit_covariance_model(
            LabelledSample(codes, f, observed(y, xi1), xi1, pi1, detector_outputs=outputs)
        )
        pi2 = ppi_design.inclusion_probabilities_active(outputs, codes, model, 40, eligible=~xi1)
        xi2 = ppi_design.draw_bernoulli(pi2, [seed, 2])
        xi, pi = np.stack([xi1, xi2]), np.stack([pi1, pi2])
    result = ppi.estimate_model_bias(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=100, seed=seed
    )
    lo, hi = result.model_bias_score.ci95
    h_lo, h_hi = result.human_only.ci95
    return lo <= truth <= hi, h_lo <= truth <= h_hi, hi - lo


@pytest.mark.simulation
@pytest.mark.parametrize("design", ["uniform", "active"])
def test_model_score_interval_covers_at_least_93_percent_of_500_studies_with_balanced_prompts(design):
    rng = np.random.default_rng(2026 if design == "uniform" else 13)
    results = np.array([_coverage_study(rng, seed, design) for seed in range(500)])
    assert results[:, 0].mean() >= 0.93
    assert results[:, 1].mean() >= 0.93
    assert results[:, 2].mean() < 0.5  # informative, not [0, 1]


def test_model_score_interval_covers_at_least_90_percent_of_40_studies_of_either_design():
    # The fast tier's case of the study above: 20 studies of each design, a looser bound. Both
    # intervals cover all 40; halved around their middle, they cover 30 and 35.
    rng = np.random.default_rng(2026)
    results = np.array([_coverage_study(rng, seed, ("uniform", "active")[seed % 2]) for seed in range(40)])
    assert results[:, 0].mean() >= 0.9
    assert results[:, 1].mean() >= 0.9
    assert results[:, 2].mean() < 0.5


# --------------------------------------------------------------------------------------------
# Contract, degenerate input, validation
# --------------------------------------------------------------------------------------------


def test_json_contract_has_the_issue_keys_and_nulls_for_undefined_figures():
    prompts = ["x", "x", "y", "y"]
    f = np.array([MALE, FEMALE, REST, REST])
    y = np.array([MALE, [NAN, NAN], [NAN, NAN], [NAN, NAN]])
    xi = np.array([True, False, False, False])
    pi = np.full(4, 0.5)
    document = ppi.estimate_model_bias(LabelledSample(prompts, f, y, xi, pi), n_boot=50).as_json()
    assert set(document) >= {
        "model_bias_score",
        "human_only",
        "detector_only",
        "n_images",
        "n_labelled",
        "rounds",
        "prompts",
        "labels_for_half_width",
    }
    assert set(document["model_bias_score"]) >= {"estimate", "ci95"}
    assert set(document["human_only"]) >= {"estimate", "ci95"}
    assert set(document["prompts"]) == {"x", "y"}
    assert set(document["prompts"]["x"]) == {"estimate", "ci95", "n_images", "n_labelled"}
    # Prompt y: the detector filtered both images and none was labelled -> no score.
    assert document["prompts"]["y"]["estimate"] is None
    assert document["prompts"]["y"]["ci95"] is None
    assert (document["n_images"], document["n_labelled"], document["rounds"]) == (4, 1, 1)


def test_empty_input_gives_undefined_figures_not_zeros():
    result = ppi.estimate_model_bias(
        LabelledSample([], np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0, bool), np.zeros(0))
    )
    assert result.model_bias_score.estimate is None
    assert result.model_bias_score.ci95 is None
    assert result.human_only.estimate is None
    assert result.detector_only is None
    assert result.prompts == {}
    assert result.labels_for_half_width is None


@pytest.mark.parametrize(
    ("xi", "pi", "y", "message"),
    [
        ([True, False], [0.0, 0.5], [MALE, [NAN, NAN]], "probability 0"),
        ([True, False], [1.5, 0.5], [MALE, [NAN, NAN]], r"\[0, 1\]"),
        ([True, False], [0.5, 0.5], [[NAN, NAN], [NAN, NAN]], "known"),
        ([[True, False], [True, False]], [[0.5, 0.5], [0.5, 0.5]], [MALE, [NAN, NAN]], "more than one round"),
        ([[True, False], [False, True]], [[0.5, 0.5], [0.5, 0.5]], [MALE, MALE], "earlier round"),
    ],
)
def test_inconsistent_designs_are_refused(xi, pi, y, message):
    with pytest.raises(ValueError, match=message):
        prompt_shares(LabelledSample(["p", "p"], [MALE, MALE], y, xi, pi))


def test_a_round_that_leaves_out_unlabelled_images_is_reported():
    xi = np.array([[True, False, False], [False, True, False]])
    pi = np.array([[0.5, 0.5, 0.5], [0.0, 0.5, 0.0]])
    y = np.array([MALE, MALE, [NAN, NAN]])
    result = ppi.estimate_model_bias(
        LabelledSample(["p"] * 3, [MALE] * 3, y, xi, pi, round_weights=(0.5, 0.5)), n_boot=20
    )
    assert any("Round 2 gave probability 0" in w for w in result.warnings)


# --------------------------------------------------------------------------------------------
# Planning the next round
# --------------------------------------------------------------------------------------------


def test_labels_for_half_width_roughly_halves_the_standard_error_when_followed():
    ratios = []
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        codes, f, y, outputs = simulate_population(rng, rng.uniform(-1, 1, 20), 40)
        n = codes.size
        pi1 = ppi_design.inclusion_probabilities_uniform(n, 80)
        xi1 = ppi_design.draw_bernoulli(pi1, seed)
        before = ppi.estimate_model_bias(
            LabelledSample(codes, f, observed(y, xi1), xi1, pi1, detector_outputs=outputs), n_boot=0
        )
        more = before.labels_for_half_width
        assert more is not None
        assert 0 < more <= n - xi1.sum()
        pi2 = ppi_design.inclusion_probabilities_uniform(n, more, eligible=~xi1)
        xi2 = ppi_design.draw_bernoulli(pi2, [seed, 1])
        xi, pi = np.stack([xi1, xi2]), np.stack([pi1, pi2])
        after = ppi.estimate_model_bias(
            LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=0
        )
        ratios.append(after.model_bias_score.se / before.model_bias_score.se)
    assert np.mean(ratios) == pytest.approx(0.5, abs=0.15)


# --------------------------------------------------------------------------------------------
# Few labels, detectors good and bad, and power tuning
# --------------------------------------------------------------------------------------------

# Detectors that say male, female or filtered; P(output | human class) per row (male, female,
# low quality / other). "class_dependent" calls 30 % of women men but 3 % of men women, and gives
# 80 % of low-quality images a gender, as Lyu et al. found real detectors do; "useless" answers
# independently of the truth.
DETECTORS = {
    "good": np.array([[0.97, 0.02, 0.01], [0.04, 0.94, 0.02], [0.10, 0.05, 0.85]]),
    "class_dependent": np.array([[0.95, 0.03, 0.02], [0.30, 0.65, 0.05], [0.50, 0.30, 0.20]]),
    "useless": np.array([[0.45, 0.35, 0.20], [0.45, 0.35, 0.20], [0.45, 0.35, 0.20]]),
}
VERDICT_VECTORS = np.array([MALE, FEMALE, REST])


def few_label_population(
    rng: np.random.Generator, detector: str, n_prompts: int, per_prompt: int, low_quality: float = 0.2
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prompt ids, detector vectors, human vectors and outputs; prompt scores like the paper's
    (a third all male, a few all female, the rest spread over (-0.6, 1))."""
    u = rng.random(n_prompts)
    scores = np.where(u < 0.32, 1.0, np.where(u < 0.37, -1.0, rng.uniform(-0.6, 1.0, n_prompts)))
    codes = np.repeat(np.arange(n_prompts), per_prompt)
    clear = rng.random(codes.size) >= low_quality
    human = np.where(clear, np.where(rng.random(codes.size) < (1 + scores[codes]) / 2, 0, 1), 2)
    cumulative = DETECTORS[detector].cumsum(axis=1)[human]
    outputs = np.minimum((rng.random(codes.size)[:, None] > cumulative).sum(axis=1), 2)
    return codes, VERDICT_VECTORS[outputs], VERDICT_VECTORS[human], outputs


N_PROMPTS, PER_PROMPT, FRACTION, N_BOOT = 20, 20, 0.1, 100


def _few_label_study(rng: np.random.Generator, seed: int, detector: str) -> tuple[float, ...]:
    # 20 prompts x 20 images, 10 % of them labelled: 2 labels a prompt.
    codes, f, y, outputs = few_label_population(rng, detector, N_PROMPTS, PER_PROMPT)
    truth = true_model_score(codes, y)
    pi = np.full(codes.size, FRACTION)
    xi = ppi_design.draw_bernoulli(pi, [seed, 21])
    result = ppi.estimate_model_bias(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=N_BOOT, seed=seed
    )
    score, human = result.model_bias_score, result.human_only
    lo, hi = score.ci95
    assert lo <= score.bias_corrected <= hi  # the point shown beside the interval lies in it
    return (
        float(lo <= truth <= hi),
        hi - lo,
        human.ci95[1] - human.ci95[0],
        result.lambda_,
        result.effective_labels / max(result.n_labelled, 1),
    )


def _check_few_label_studies(detector: str, studies: int, coverage: float) -> None:
    rng = np.random.default_rng({"good": 1, "class_dependent": 2, "useless": 3}[detector])
    results = np.array([_few_label_study(rng, seed, detector) for seed in range(studies)])
    covered, width, human_width, lam, effective = results.T
    assert covered.mean() >= coverage
    ratio = width.mean() / human_width.mean()
    if detector == "useless":
        # Power tuning gives it (almost) no weight: never materially worse than labels alone.
        assert lam.mean() < 0.1
        assert ratio <= 1.05
        assert effective.mean() == pytest.approx(1.0, abs=0.1)
    elif detector == "good":
        assert lam.mean() > 0.5
        assert ratio < 0.6
        assert effective.mean() > 2.0
    else:
        assert ratio < 0.85


@pytest.mark.simulation
@pytest.mark.parametrize("detector", ["good", "class_dependent", "useless"])
def test_interval_covers_at_least_93_percent_with_few_labels_whatever_the_detector(detector):
    # Before the shares were drawn, the class-dependent detector's interval covered 0.83 here (0.76-0.91 in
    # a larger study): pseudo-populations built on each prompt's EM shares were less
    # balanced than the truth, and the bootstrap under-corrected the upward bias of eq. 1.
    # Now (200 studies): 0.995 / 0.965 / 0.95, widths 0.49 / 0.74 / 0.97 x labels-only.
    _check_few_label_studies(detector, 200, 0.93)


@pytest.mark.parametrize(("detector", "studies"), [("good", 8), ("class_dependent", 20), ("useless", 12)])
def test_interval_covers_at_least_85_percent_of_a_few_studies_with_few_labels(detector, studies):
    # The fast tier's case of the study above, with its width and weight checks: the intervals
    # cover 8/8, 18/20 and 12/12; halved around their middle, 6/8, 14/20 and 10/12.
    _check_few_label_studies(detector, studies, 0.85)


def test_the_detectors_weight_is_cross_fitted_so_a_fold_never_sees_its_own_labels():
    rng = np.random.default_rng(4)
    codes, f, y, outputs = few_label_population(rng, "class_dependent", 10, 30)
    pi = np.full(codes.size, 0.3)
    xi = ppi_design.draw_bernoulli(pi, 5)
    first = tune_power(LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs))
    # Flip every label of fold 0 (images 0, 5, 10, ...): λ of fold 0 must not move, the others'
    # must (they learn from fold 0's labels).
    fold0 = np.arange(codes.size) % ppi.POWER_FOLDS == 0
    flipped = y.copy()
    flipped[fold0] = y[fold0][:, ::-1]
    second = tune_power(LabelledSample(codes, f, observed(flipped, xi), xi, pi, detector_outputs=outputs))
    np.testing.assert_array_equal(first.per_image[fold0], second.per_image[fold0])
    assert not np.allclose(first.per_image[~fold0], second.per_image[~fold0])
    assert ((first.per_image >= 0) & (first.per_image <= 1)).all()
    assert first.value == pytest.approx(
        np.mean([first.per_image[np.arange(codes.size) % 5 == k][0] for k in range(5)])
    )


def test_a_census_round_gives_the_exact_human_number_with_width_0_whatever_lambda():
    rng = np.random.default_rng(6)
    codes, f, y, outputs = few_label_population(rng, "class_dependent", 6, 10)
    xi = np.ones(codes.size, dtype=bool)
    pi = np.ones(codes.size)
    result = ppi.estimate_model_bias(LabelledSample(codes, f, y, xi, pi, detector_outputs=outputs), n_boot=50)
    truth = true_model_score(codes, y)
    assert result.model_bias_score.estimate == pytest.approx(truth, abs=1e-12)
    assert result.model_bias_score.bias_corrected == pytest.approx(truth, abs=1e-12)
    assert result.model_bias_score.ci95 == pytest.approx((truth, truth), abs=1e-12)
    assert 0.0 <= result.lambda_ <= 1.0
    assert result.effective_labels == codes.size
    document = result.as_json()
    assert document["lambda"] == result.lambda_
    assert document["effective_labels"] == codes.size


def test_without_power_tuning_the_estimate_is_the_issue_13_estimator():
    rng = np.random.default_rng(7)
    codes, f, y, outputs = few_label_population(rng, "good", 8, 20)
    pi = np.full(codes.size, 0.25)
    xi = ppi_design.draw_bernoulli(pi, 8)
    plain = ppi.estimate_model_bias(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs),
        n_boot=0,
        power_tuning=False,
    )
    shares = prompt_shares(LabelledSample(codes, f, observed(y, xi), xi, pi))
    d = (shares.shares[:, 0] - shares.shares[:, 1]) / shares.shares.sum(axis=1)
    assert plain.lambda_ == 1.0
    assert plain.model_bias_score.estimate == pytest.approx(np.abs(d).mean())


def test_the_design_bootstraps_cost_follows_the_groups_of_alike_images_not_the_images(monkeypatch):
    # a replicate draws counts per group of exchangeable images (prompt, detector
    # output, label, π), so a study ten times larger costs the same; and a chunk of replicates
    # stays under BOOTSTRAP_CHUNK_ELEMENTS (group x class x round cells) whatever the study.
    calls: list[tuple[int, int]] = []
    detector_world = ppi_bootstrap.detector_world

    def spy(*args, **kwargs):
        draw = detector_world(*args, **kwargs)

        def counted(r, b, prompts, outputs):
            calls.append((b, prompts.size))
            return draw(r, b, prompts, outputs)

        return counted

    monkeypatch.setattr(ppi, "detector_world", spy)
    groups = []
    for per_prompt in (500, 5000):
        rng = np.random.default_rng(7)
        codes, f, y, outputs = simulate_population(rng, np.array([0.6, -0.2]), per_prompt)
        pi = np.full(codes.size, 0.02)
        xi = ppi_design.draw_bernoulli(pi, 8)
        calls.clear()
        result = ppi.estimate_model_bias(
            LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=60, seed=3
        )
        assert result.model_bias_score.ci95 is not None
        assert [b for b, _ in calls] == [60]
        groups.append(calls[0][1])
    # At most 2 prompts x 5 outputs x (unlabelled, or labelled male, female, rest) x 5 folds'
    # λ, for 1,000 images as for 10,000.
    assert max(groups) <= 2 * 5 * 4 * ppi.POWER_FOLDS
    calls.clear()
    monkeypatch.setattr(ppi_bootstrap, "BOOTSTRAP_CHUNK_ELEMENTS", 8 * groups[1] * 6)  # 3 classes x 2
    ppi.estimate_model_bias(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=60, seed=3
    )
    assert max(b for b, _ in calls) == 8
    assert sum(b for b, _ in calls) == 60


def test_the_bootstrap_replicates_match_drawing_every_image():
    # One prompt, one uniform round: the replicates' true scores must have the distribution of
    # a population drawn image by image from the same world (here: P(male) 0.7, P(clear) 0.9).
    n, b = 400, 4000
    data = ppi_shares.prepare(
        LabelledSample(
            np.zeros(n, dtype=int),
            np.zeros((n, 2)),
            np.full((n, 2), np.nan),
            np.zeros(n, bool),
            np.full(n, 0.1),
        )
    )

    def world(rng, size, prompts, outputs):
        return np.full((size, prompts.size), 0.7), np.full((size, prompts.size), 0.9)

    replicates = ppi_bootstrap.design_bootstrap(
        data, world, [], np.zeros(n, dtype=np.int64), b, np.random.default_rng(1)
    )
    u = np.random.default_rng(2).random((b, n))
    male = (u < 0.7).sum(axis=1)
    female = ((u >= 0.7) & (u < 0.9)).sum(axis=1)
    direct = np.abs((male - female) / (male + female))
    assert replicates.theta.mean() == pytest.approx(direct.mean(), abs=0.004)
    assert replicates.theta.std() == pytest.approx(direct.std(), rel=0.06)
