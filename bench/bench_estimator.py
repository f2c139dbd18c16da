"""Coverage and width of the prediction-powered bias-score intervals by simulation.

Run from the repository root (numpy only, no database, no network):

    .venv/bin/python bench/bench_estimator.py --detectors     # the detectors' table (below), 200 studies
    .venv/bin/python bench/bench_estimator.py --detectors --studies 100 --boot 200   # quicker
    .venv/bin/python bench/bench_estimator.py                 # paper-like study, 300 studies (~20 min)
    .venv/bin/python bench/bench_estimator.py --extra         # + balanced and misspecified studies
    .venv/bin/python bench/bench_estimator.py --generic       # attributes, pair_change,
                                                              # questions, objects (~40 min)
    .venv/bin/python bench/bench_estimator.py --census        # every item labelled
    .venv/bin/python bench/bench_estimator.py --judge         # a VLM judge's probabilities vs
                                                              # its hard answers (~3 min)

``--judge``: a questions study of 3 groups x 200 items and 3 answers, labels at 5, 10 and 20 %,
two judges: ``calibrated`` (per item a belief q drawn around its group's shares; the true answer
is drawn from q, so P(answer | q) = q: perfectly calibrated probabilities, hard answer arg-max
q) and ``class-dependent`` (its answer misses 35 % of group 0's answer 0 and 5 % of the rest, its
probabilities 0.8 on its answer: errors that depend on the true class, probabilities not
calibrated). For each, the share of answer 0 in group 0 and the max_gap of answer 0 are estimated
twice from the same labels: with the judge's probabilities as the prediction, and with its hard
answer (one-hot). Printed: coverage and mean width of each. Then a gender judge
(``gender_judge_cell``: 50 prompts x 20 images as ``--detectors`` draws them, half the studies):
the model bias score's interval with the judge's (p_male, p_female) as detector vectors and with
its verdicts, ``calibrated`` (the good detector's verdicts, P(class | verdict) as probabilities)
and ``class-dependent`` (the class-dependent detector, 0.8 on its verdict).

``--generic``: 2 groups x 200 items, uniform labels at 5, 10 and 20 %, three detectors
(good: 1 % of items wrong; class-dependent: misses 35 % of group 0's yes but 5 % of group 1's;
useless: independent of the truth), per protocol's headline estimand: attributes the GEP score
over 15 entries, pair_change one share of changed pairs, objects one gender's total of confirmed
instances of a class (Poisson counts; the good detector adds a false box to 3 % of images), and
objects_v Cramér's V of the 2 x 5 table of confirmed instances.

``--detectors``: 50 prompts x 20 images, 20 % low quality, uniform labels at 5, 10, 20
and 40 % of the images, and three detectors that say male, female or filtered -- a good one, one
whose errors depend on the true class (it calls 30 % of women men but 3 % of men women) and that
gives 80 % of low-quality images a gender, as Lyu et al. found real detectors do, and a useless
one whose output is independent of the truth. Per detector and budget it prints the coverage of
the 95 % interval of the model bias score (PPI with power tuning, and labels only), the truth
below / above the interval, the mean widths and their ratio, the mean λ and effective labels,
and the bias-corrected estimate's mean error. ``--no-tuning`` fixes λ = 1 (the untuned estimator).

A study is like the paper's (Lyu et al. 2025): 100 prompts x 40 images of one T2I model. Prompt
scores follow the paper's findings (about a third of prompts all male, a few all female, one in
ten balanced -- |score| < 0.1, where |·| is not smooth --, the rest spread over (-0.6, 1)), 12.5 %
of images are low quality, and the detector is about as good as FairFace in the paper's Table 3
(filter recall 98 %, filter rate 72 %, accuracy 99 % male / 89 % female), with a confidence:
it says male-sure, male-unsure, female-sure, female-unsure or filtered. Each simulated study
draws a new population, then the labels:

* human only: one uniform round of n labels; Horvitz-Thompson (f = 0);
* uniform PPI: the same round, prediction-powered;
* active PPI: a uniform pilot of n/4 labels, then an ``active`` round of 3n/4 (covariance model
  learned from the pilot, default mix and floor), rounds combined with the default weights.

For n = 200, 400 and 800 labels the script prints, per method, the coverage of the 95 %
interval of the model bias score (eq. 1 on every image's human label), its mean width, the
plug-in's mean error, the coverage of the prompt intervals (all prompts; prompts with
|true score| < 0.2), and the width ratio human-only / active. Coverage from S studies has a
Monte Carlo standard error of about sqrt(0.95 x 0.05 / S) (0.013 for 300).

``--extra`` adds two stress tests at 400 labels: half the prompts balanced; and a misspecified
detector whose error rates differ between prompts (x 0.3 to x 3), against the covariance
model's assumption that they do not.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metrics import ppi, ppi_design, ppi_mean, ppi_shares  # noqa: E402 (after the path set-up, as the script runs from bench/)
from metrics.ppi_shares import LabelledSample  # noqa: E402

N_PROMPTS = 100
N_PER_PROMPT = 40
LOW_QUALITY = 0.125
# P(detector output | human class); outputs: male sure, male unsure, female sure, female
# unsure, filtered.
LIKELIHOOD = np.array(
    [
        [0.86, 0.113, 0.003, 0.008, 0.016],
        [0.02, 0.08, 0.74, 0.14, 0.02],
        [0.07, 0.12, 0.03, 0.06, 0.72],
    ]
)
OUTPUT_VECTORS = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
# The outputs whose verdict is wrong for each human class (male, female, low quality).
WRONG = np.array([[0, 0, 1, 1, 1], [1, 1, 0, 0, 1], [1, 1, 1, 1, 0]], dtype=bool)
METHODS = ("human only", "uniform PPI", "active PPI")


def prompt_scores(rng: np.random.Generator, balanced: float) -> np.ndarray:
    """True prompt bias scores like the paper's Table 7 / Figure 3."""
    u = rng.random(N_PROMPTS)
    scores = np.where(u < 0.32, 1.0, np.where(u < 0.37, -1.0, rng.uniform(-0.6, 1.0, N_PROMPTS)))
    near_zero = rng.random(N_PROMPTS) < balanced
    scores[near_zero] = rng.uniform(-0.1, 0.1, int(near_zero.sum()))
    return scores


def population(
    rng: np.random.Generator, scores: np.ndarray, misspecified: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prompt ids, detector vectors, human vectors and detector outputs of every image."""
    codes = np.repeat(np.arange(N_PROMPTS), N_PER_PROMPT)
    clear = rng.random(codes.size) >= LOW_QUALITY
    human = np.where(clear, np.where(rng.random(codes.size) < (1 + scores[codes]) / 2, 0, 1), 2)
    likelihood = np.broadcast_to(LIKELIHOOD, (N_PROMPTS, 3, 5)).copy()
    if misspecified:
        # Each prompt's detector errs 0.3 to 3 times as often as on average (e.g. harder scenes).
        factor = np.exp(rng.uniform(np.log(0.3), np.log(3.0), N_PROMPTS))
        for c in range(3):
            wrong = WRONG[c]
            scaled = LIKELIHOOD[c, wrong][None, :] * factor[:, None]
            likelihood[:, c, wrong] = scaled
            right = ~wrong
            # The verdict-consistent outputs share what is left, in their original proportion.
            share = LIKELIHOOD[c, right] / LIKELIHOOD[c, right].sum()
            likelihood[:, c, right] = (1 - scaled.sum(axis=1))[:, None] * share[None, :]
    cumulative = likelihood.cumsum(axis=2)[codes, human]
    outputs = np.minimum((rng.random(codes.size)[:, None] > cumulative).sum(axis=1), 4)
    return codes, OUTPUT_VECTORS[outputs], ppi_shares.CLASS_VECTORS[human], outputs


def true_score(codes: np.ndarray, y: np.ndarray) -> float:
    male = np.bincount(codes, weights=y[:, 0], minlength=N_PROMPTS)
    female = np.bincount(codes, weights=y[:, 1], minlength=N_PROMPTS)
    clear = male + female
    ok = clear > 0
    return float(np.abs((male - female)[ok] / clear[ok]).mean())


@dataclass
class Tally:
    covered: list[bool]
    width: list[float]
    error: list[float]
    prompt_covered: list[float]
    balanced_covered: list[float]

    @classmethod
    def empty(cls) -> Tally:
        return cls([], [], [], [], [])

    def add(self, score: ppi.ScoreEstimate, truth: float) -> None:
        assert score.ci95 is not None
        assert score.estimate is not None
        lo, hi = score.ci95
        self.covered.append(lo <= truth <= hi)
        self.width.append(hi - lo)
        self.error.append(score.estimate - truth)


def prompt_coverage(result: ppi.ModelBiasEstimate, codes: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Share of prompts (all; balanced only) whose interval holds the true prompt score."""
    hits, balanced = [], []
    for p, estimate in result.prompts.items():
        mask = codes == p
        m, f = y[mask, 0].sum(), y[mask, 1].sum()
        if estimate.ci95 is None or m + f == 0:
            continue
        d = (m - f) / (m + f)
        hit = estimate.ci95[0] <= d <= estimate.ci95[1]
        hits.append(hit)
        if abs(d) < 0.2:
            balanced.append(hit)
    return float(np.mean(hits)), float(np.mean(balanced)) if balanced else float("nan")


def observed(y: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    return np.where(labelled[:, None], y, np.nan)


def one_study(
    rng: np.random.Generator, seed: int, budget: int, n_boot: int, balanced: float, misspecified: bool
) -> tuple[float, dict[str, ppi.ModelBiasEstimate], np.ndarray, np.ndarray]:
    codes, f, y, outputs = population(rng, prompt_scores(rng, balanced), misspecified)
    truth = true_score(codes, y)
    n = codes.size
    pi = ppi_design.inclusion_probabilities_uniform(n, budget)
    xi = ppi_design.draw_bernoulli(pi, [seed, budget, 1])
    uniform = ppi.estimate_model_bias(
        LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs), n_boot=n_boot, seed=seed
    )
    pilot = budget // 4
    pi1 = ppi_design.inclusion_probabilities_uniform(n, pilot)
    xi1 = ppi_design.draw_bernoulli(pi1, [seed, budget, 2])
    model = ppi_shares.fit_covariance_model(
        LabelledSample(codes, f, observed(y, xi1), xi1, pi1, detector_outputs=outputs)
    )
    pi2 = ppi_design.inclusion_probabilities_active(outputs, codes, model, budget - pilot, eligible=~xi1)
    xi2 = ppi_design.draw_bernoulli(pi2, [seed, budget, 3])
    both = np.stack([xi1, xi2])
    active = ppi.estimate_model_bias(
        LabelledSample(
            codes, f, observed(y, xi1 | xi2), both, np.stack([pi1, pi2]), detector_outputs=outputs
        ),
        n_boot=n_boot,
        seed=seed,
    )
    return truth, {"uniform": uniform, "active": active}, codes, y


def run(
    label: str, budgets: list[int], studies: int, n_boot: int, balanced: float, misspecified: bool, seed: int
) -> None:
    print(
        f"\n== {label}: {N_PROMPTS} prompts x {N_PER_PROMPT} images, {studies} studies, {n_boot} bootstrap replicates"
    )
    print(
        f"{'labels':>6}  {'method':<12} {'coverage':>8} {'width':>7} {'plug-in err':>11} "
        f"{'prompt cov':>10} {'balanced':>8}"
    )
    for budget in budgets:
        rng = np.random.default_rng([seed, budget])
        tallies = {m: Tally.empty() for m in METHODS}
        detector_error = []
        start = time.perf_counter()
        for s in range(studies):
            truth, results, codes, y = one_study(rng, s, budget, n_boot, balanced, misspecified)
            tallies["human only"].add(results["uniform"].human_only, truth)
            tallies["uniform PPI"].add(results["uniform"].model_bias_score, truth)
            tallies["active PPI"].add(results["active"].model_bias_score, truth)
            for name, key in (("uniform PPI", "uniform"), ("active PPI", "active")):
                everyone, balanced_only = prompt_coverage(results[key], codes, y)
                tallies[name].prompt_covered.append(everyone)
                tallies[name].balanced_covered.append(balanced_only)
            assert results["uniform"].detector_only is not None
            detector_error.append(results["uniform"].detector_only - truth)
        seconds = (time.perf_counter() - start) / studies
        for name in METHODS:
            t = tallies[name]
            prompt = (
                f"{np.mean(t.prompt_covered):10.3f} {np.nanmean(t.balanced_covered):8.3f}"
                if t.prompt_covered
                else ""
            )
            print(
                f"{budget:>6}  {name:<12} {np.mean(t.covered):8.3f} {np.mean(t.width):7.4f} "
                f"{np.mean(t.error):+11.4f} {prompt}"
            )
        ratio = np.mean(tallies["human only"].width) / np.mean(tallies["active PPI"].width)
        print(
            f"{'':>6}  width human only / active PPI = {ratio:.1f}x;  detector only: mean error "
            f"{np.mean(detector_error):+.4f};  {seconds:.2f} s per study"
        )


# P(output | human class), outputs male / female / filtered.
DETECTORS = {
    "good": np.array([[0.97, 0.02, 0.01], [0.04, 0.94, 0.02], [0.10, 0.05, 0.85]]),
    # As good as the other protocols' simulated good detector (--generic): errs on 1 % of images.
    "good-1%": np.array([[0.99, 0.005, 0.005], [0.005, 0.99, 0.005], [0.005, 0.005, 0.99]]),
    "class-dependent": np.array([[0.95, 0.03, 0.02], [0.30, 0.65, 0.05], [0.50, 0.30, 0.20]]),
    "useless": np.array([[0.45, 0.35, 0.20], [0.45, 0.35, 0.20], [0.45, 0.35, 0.20]]),
}
VERDICTS = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])


def detector_population(
    rng: np.random.Generator,
    detector: str,
    n_prompts: int = 50,
    per_prompt: int = 20,
    low_quality: float = 0.2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Prompt ids, detector vectors, human vectors and outputs; prompt scores as in ``prompt_scores``."""
    u = rng.random(n_prompts)
    scores = np.where(u < 0.32, 1.0, np.where(u < 0.37, -1.0, rng.uniform(-0.6, 1.0, n_prompts)))
    near_zero = rng.random(n_prompts) < 0.1
    scores[near_zero] = rng.uniform(-0.1, 0.1, int(near_zero.sum()))
    codes = np.repeat(np.arange(n_prompts), per_prompt)
    clear = rng.random(codes.size) >= low_quality
    human = np.where(clear, np.where(rng.random(codes.size) < (1 + scores[codes]) / 2, 0, 1), 2)
    cumulative = DETECTORS[detector].cumsum(axis=1)[human]
    outputs = np.minimum((rng.random(codes.size)[:, None] > cumulative).sum(axis=1), 2)
    return codes, VERDICTS[outputs], ppi_shares.CLASS_VECTORS[human], outputs


def run_detectors(
    studies: int, n_boot: int, fractions: list[float], tuning: bool, seed: int, only: list[str] | None = None
) -> None:
    print(
        f"\n== 50 prompts x 20 images, {studies} studies, {n_boot} bootstrap replicates, "
        f"power tuning {'on' if tuning else 'off (λ = 1)'}"
    )
    print(
        f"{'detector':<16}{'labels':>7} {'coverage':>8} {'below/above':>11} {'width':>6} "
        f"{'labels-only cov':>15} {'width':>6} {'ratio':>6} {'λ':>5} {'eff. labels':>11} {'bc err':>7} {'s/study':>7}"
    )
    for detector in DETECTORS:
        if only and detector not in only:
            continue
        for fraction in fractions:
            rng = np.random.default_rng([seed, int(fraction * 1000), len(detector)])
            rows = []
            start = time.perf_counter()
            for s in range(studies):
                codes, f, y, outputs = detector_population(rng, detector)
                truth = _score(codes, y)
                pi = np.full(codes.size, fraction)
                xi = ppi_design.draw_bernoulli(pi, [seed, s, int(fraction * 1000)])
                result = ppi.estimate_model_bias(
                    LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs),
                    n_boot=n_boot,
                    seed=s,
                    power_tuning=tuning,
                )
                score, human = result.model_bias_score, result.human_only
                assert score.ci95 is not None
                assert human.ci95 is not None
                assert score.bias_corrected is not None
                lo, hi = score.ci95
                h_lo, h_hi = human.ci95
                rows.append(
                    (
                        lo <= truth <= hi,
                        truth < lo,
                        truth > hi,
                        hi - lo,
                        h_lo <= truth <= h_hi,
                        h_hi - h_lo,
                        result.lambda_ if result.lambda_ is not None else float("nan"),
                        result.effective_labels if result.effective_labels is not None else float("nan"),
                        score.bias_corrected - truth,
                    )
                )
            seconds = (time.perf_counter() - start) / studies
            a = np.array(rows, dtype=float)
            m = a.mean(axis=0)
            n_labels = round(fraction * 1000)
            print(
                f"{detector:<16}{n_labels:>7} {m[0]:8.3f} {int(a[:, 1].sum()):>5}/{int(a[:, 2].sum()):<5} {m[3]:6.3f} "
                f"{m[4]:15.3f} {m[5]:6.3f} {m[3] / m[5]:6.2f} {m[6]:5.2f} {m[7]:11.0f} {m[8]:+7.3f} {seconds:7.2f}"
            )


def _score(codes: np.ndarray, y: np.ndarray) -> float:
    """Eq. 1 on every image's human label, any number of prompts."""
    n = int(codes.max()) + 1
    male = np.bincount(codes, weights=y[:, 0], minlength=n)
    female = np.bincount(codes, weights=y[:, 1], minlength=n)
    clear = male + female
    ok = clear > 0
    return float(np.abs((male - female)[ok] / clear[ok]).mean())


# --------------------------------------------------------------------------------------------
# --generic: every protocol's mean-type estimands (metrics.ppi_mean)
# --------------------------------------------------------------------------------------------

GENERIC_DETECTORS = ("good", "class-dependent", "useless")
N_PER_GROUP = 200


def generic_detector(rng: np.random.Generator, y: np.ndarray, group: np.ndarray, kind: str) -> np.ndarray:
    """Detector values for binary human values y (items x entries): ``good`` errs on 1 % of
    items; ``class-dependent`` misses 35 % of the yes of group 0 (women) but 5 % of group 1's,
    and says yes to 10 % of the no; ``useless`` is uniform noise independent of y. Soft scores
    in [0, 1] (a calibrated-looking 0.05 / 0.95 with a little noise)."""
    if kind == "useless":
        return rng.uniform(0, 1, y.shape)
    if kind == "good":
        flip = rng.random(y.shape) < 0.01
    else:
        miss = np.where(group[:, None] == 0, 0.35, 0.05)
        flip = np.where(y == 1, rng.random(y.shape) < miss, rng.random(y.shape) < 0.10)
    said = np.where(flip, 1 - y, y)
    return np.clip(0.05 + 0.9 * said + rng.normal(0, 0.03, y.shape), 0, 1)


def generic_count_detector(
    rng: np.random.Generator, y: np.ndarray, group: np.ndarray, kind: str
) -> np.ndarray:
    """Detected instances per image for confirmed counts y: ``good`` adds a false box to 3 %
    of images; ``class-dependent`` also misses a third of group 0's instances; ``useless`` is
    Poisson noise with the same mean, independent of y."""
    if kind == "useless":
        return rng.poisson(max(float(y.mean()), 0.1), y.shape).astype(float)
    extra = (rng.random(y.shape) < 0.03).astype(float)
    if kind == "good":
        return y + extra
    missed = rng.binomial(y.astype(int), np.where(group[:, None] == 0, 1 / 3, 0.0))
    return y - missed + extra + (rng.random(y.shape) < 0.1)


def answers_detector(
    rng: np.random.Generator, answer: np.ndarray, group: np.ndarray, k: int, kind: str
) -> np.ndarray:
    """One-hot answers (items x k) of an ``answers`` detector for the true answers: ``good``
    gives another answer to 1 % of items; ``class-dependent`` to 35 % of group 0's answer 0 and
    5 % of the rest; ``useless`` answers at random, independently of the truth."""
    if kind == "useless":
        said = rng.integers(0, k, answer.shape)
    else:
        wrong = 0.01 if kind == "good" else np.where((group == 0) & (answer == 0), 0.35, 0.05)
        flip = rng.random(answer.shape) < wrong
        said = np.where(flip, (answer + rng.integers(1, k, answer.shape)) % k, answer)
    return np.eye(k)[said]


def generic_study(
    rng: np.random.Generator, protocol: str, kind: str, n_per_group: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One population: group (0 women, 1 men; questions: three groups), human values (items x
    k), detector values."""
    if protocol == "questions":
        group = np.arange(2 * n_per_group) % 3
        shares = rng.dirichlet(np.ones(k), 3)
        answer = np.array([rng.choice(k, p=shares[g]) for g in group])
        return group, np.eye(k)[answer], answers_detector(rng, answer, group, k, kind)
    group = np.repeat([0, 1], n_per_group)
    if protocol in ("objects", "objects_v"):
        rate = rng.uniform(0.2, 2.0, (2, k))
        y = rng.poisson(rate[group]).astype(float)
        return group, y, generic_count_detector(rng, y, group, kind)
    if protocol == "pair_change":
        p = np.repeat(rng.uniform(0.05, 0.6, (1, k)), 2, axis=0)
    else:
        base = rng.uniform(0.05, 0.6, (1, k))
        gap = rng.uniform(-0.3, 0.3, (1, k)) * rng.choice([0.0, 1.0], (1, k), p=[0.3, 0.7])
        p = np.clip(np.vstack([base + gap / 2, base - gap / 2]), 0.01, 0.99)
    y = (rng.random((2 * n_per_group, k)) < p[group]).astype(float)
    return group, y, generic_detector(rng, y, group, kind)


def generic_estimands(
    protocol: str, group: np.ndarray, y: np.ndarray, f: np.ndarray, pi: np.ndarray, xi: np.ndarray, seed: int
) -> tuple[ppi_mean.Estimand, float]:
    """The protocol's headline estimand and its truth: attributes -> GEP score; pair_change ->
    the share of changed pairs (entry 0, over every pair); objects -> women's confirmed
    instances of class 0 (a total)."""
    yobs = np.where(xi[:, None], y, np.nan)
    if protocol == "attributes":
        entries = [
            ppi_mean.Entry(f[:, j], yobs[:, j], ppi_mean.difference_coefficients(group == 0, group == 1))
            for j in range(y.shape[1])
        ]
        score, _ = ppi_mean.estimate_mean_abs(entries, xi, pi, seed=seed, draws=1000)
        d = y[group == 0].mean(axis=0) - y[group == 1].mean(axis=0)
        return score, float(np.mean(np.abs(d)))
    if protocol == "pair_change":
        coef = ppi_mean.mean_coefficients(np.ones(len(group), dtype=bool))
        est = ppi_mean.estimate_linear(f[:, 0], yobs[:, 0], xi, pi, coef, bounds=(0.0, 1.0), seed=seed)
        return est, float(y[:, 0].mean())
    if protocol == "questions":
        entries = [
            ppi_mean.Entry(f[:, 0], yobs[:, 0], ppi_mean.mean_coefficients(group == g))
            for g in range(int(group.max()) + 1)
        ]
        gap, _ = ppi_mean.estimate_max_gap(entries, xi, pi, seed=seed, draws=1000)
        shares = [y[group == g, 0].mean() for g in range(int(group.max()) + 1)]
        return gap, float(max(shares) - min(shares))
    if protocol == "objects_v":
        est, _, _ = ppi_mean.estimate_table(group, f, yobs, xi, pi, seed=seed, draws=500)
        truth_v = ppi_mean.cramers_v(np.array([y[group == g].sum(axis=0) for g in (0, 1)]))
        return est, float(truth_v or 0.0)
    coef = (group == 0).astype(float)
    est = ppi_mean.estimate_linear(f[:, 0], yobs[:, 0], xi, pi, coef, bounds=(0.0, None), seed=seed)
    return est, float(y[group == 0, 0].sum())


def generic_cell(
    protocol: str, kind: str, fraction: float, studies: int, n_per_group: int, k: int, seed: int
) -> dict[str, float]:
    """Coverage, mean widths and λ of one protocol x detector x budget over ``studies`` studies."""
    rng = np.random.default_rng(seed)
    cover = cover_h = width = width_h = lam = eff = 0.0
    undefined = 0
    for s in range(studies):
        group, y, f = generic_study(rng, protocol, kind, n_per_group, k)
        pi = np.full(len(group), fraction)
        xi = rng.random(len(group)) < pi
        est, truth = generic_estimands(protocol, group, y, f, pi, xi, seed + s)
        if est.ci95 is None or est.human_only_ci95 is None:
            # Fewer than two labels in a group: the estimate says "undefined", not a number.
            undefined += 1
            continue
        cover += est.ci95[0] - 1e-12 <= truth <= est.ci95[1] + 1e-12
        cover_h += est.human_only_ci95[0] - 1e-12 <= truth <= est.human_only_ci95[1] + 1e-12
        width += est.ci95[1] - est.ci95[0]
        width_h += est.human_only_ci95[1] - est.human_only_ci95[0]
        lam += est.lam or 0.0
        eff += (
            est.effective_labels
            if est.effective_labels is not None and np.isfinite(est.effective_labels)
            else 0.0
        )
    defined = max(1, studies - undefined)
    return {
        "coverage": cover / defined,
        "coverage_human": cover_h / defined,
        "width": width / defined,
        "width_human": width_h / defined,
        "ratio": width / width_h if width_h else float("nan"),
        "lambda": lam / defined,
        "effective_labels": eff / defined,
        "undefined": undefined,
    }


GENERIC_PROTOCOLS = {"attributes": 15, "pair_change": 1, "questions": 3, "objects": 1, "objects_v": 5}


def run_census(seed: int) -> None:
    """Every item labelled (π = 1): each protocol's headline estimand must be the exact human
    number with an interval of width 0, whatever the detector."""
    print("census (every item labelled): estimate - truth, interval width")
    rng = np.random.default_rng(seed)
    for protocol, k in GENERIC_PROTOCOLS.items():
        for kind in GENERIC_DETECTORS:
            group, y, f = generic_study(rng, protocol, kind, N_PER_GROUP, k)
            n = len(group)
            est, truth = generic_estimands(protocol, group, y, f, np.ones(n), np.ones(n, bool), seed)
            assert est.estimate is not None
            assert est.ci95 is not None
            print(
                f"{protocol:12} {kind:16} {est.estimate - truth:+.1e} {est.ci95[1] - est.ci95[0]:.1e}",
                flush=True,
            )


def run_generic(studies: int, fractions: list[float], seed: int, only: list[str] | None = None) -> None:
    print(f"--generic: 2 groups x {N_PER_GROUP} items, {studies} studies per cell (metrics.ppi_mean)")
    print(
        f"{'protocol':12} {'detector':16} {'labels':>6} {'cover':>6} {'cover_h':>7} "
        f"{'width':>7} {'width_h':>7} {'ratio':>6} {'λ':>5} {'eff':>6} {'undef':>5}"
    )
    for protocol, k in GENERIC_PROTOCOLS.items():
        if only and protocol not in only:
            continue
        for kind in GENERIC_DETECTORS:
            for fraction in fractions:
                row = generic_cell(protocol, kind, fraction, studies, N_PER_GROUP, k, seed)
                print(
                    f"{protocol:12} {kind:16} {fraction:6.0%} {row['coverage']:6.3f} {row['coverage_human']:7.3f} "
                    f"{row['width']:7.3f} {row['width_human']:7.3f} {row['ratio']:6.2f} "
                    f"{row['lambda']:5.2f} {row['effective_labels']:6.1f} {row['undefined']:5d}",
                    flush=True,
                )


# --------------------------------------------------------------------------------------------
# --judge: a VLM judge's probabilities against its hard answers as the prediction
# --------------------------------------------------------------------------------------------

JUDGES = ("calibrated", "class-dependent")
#: The calibrated judge's belief q ~ Dirichlet(CONCENTRATION x its group's shares): a small total
#: makes it sure of most images (q near a corner), unsure of some.
CONCENTRATION = 1.0


def judge_study(
    rng: np.random.Generator, kind: str, n_per_group: int = N_PER_GROUP, k: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One population of 3 groups: (group, true answers one-hot, the judge's probabilities,
    its hard answers one-hot). See ``--judge`` in the module docstring."""
    group = np.repeat(np.arange(3), n_per_group)
    shares = rng.dirichlet(np.full(k, 2.0), 3)
    if kind == "calibrated":
        q = np.array([rng.dirichlet(CONCENTRATION * shares[g]) for g in group])
        answer = np.array([rng.choice(k, p=row) for row in q])
        return group, np.eye(k)[answer], q, np.eye(k)[q.argmax(axis=1)]
    answer = np.array([rng.choice(k, p=shares[g]) for g in group])
    hard = answers_detector(rng, answer, group, k, "class-dependent")
    q = 0.8 * hard + 0.2 * (1 - hard) / (k - 1)
    return group, np.eye(k)[answer], q, hard


def judge_cell(
    kind: str, fraction: float, studies: int, seed: int, n_per_group: int = N_PER_GROUP, gap: bool = True
) -> dict[str, float]:
    """Coverage and mean width, with the judge's probabilities (``soft``) and with its hard
    answers (``hard``) as the prediction, of the share of answer 0 in group 0 and of the max_gap
    of answer 0 (unless not ``gap``), over ``studies`` studies."""
    rng = np.random.default_rng(seed)
    sums: dict[str, float] = {}
    defined = 0
    for s in range(studies):
        group, y, q, hard = judge_study(rng, kind, n_per_group)
        pi = np.full(len(group), fraction)
        xi = rng.random(len(group)) < pi
        yobs = np.where(xi, y[:, 0], np.nan)
        true_shares = [y[group == g, 0].mean() for g in range(3)]
        truth = {"share": true_shares[0], "gap": max(true_shares) - min(true_shares)}
        found = {}
        for name, f in (("soft", q[:, 0]), ("hard", hard[:, 0])):
            coef = ppi_mean.mean_coefficients(group == 0)
            found[f"share_{name}"] = ppi_mean.estimate_linear(
                f, yobs, xi, pi, coef, bounds=(0.0, 1.0), seed=seed + s
            )
            if gap:
                entries = [ppi_mean.Entry(f, yobs, ppi_mean.mean_coefficients(group == g)) for g in range(3)]
                found[f"gap_{name}"], _ = ppi_mean.estimate_max_gap(
                    entries, xi, pi, seed=seed + s, draws=1000
                )
        if any(est.ci95 is None for est in found.values()):
            continue
        defined += 1
        for key, est in found.items():
            assert est.ci95 is not None
            t = truth[key.split("_")[0]]
            sums[f"cover_{key}"] = sums.get(f"cover_{key}", 0.0) + (
                est.ci95[0] - 1e-12 <= t <= est.ci95[1] + 1e-12
            )
            sums[f"width_{key}"] = sums.get(f"width_{key}", 0.0) + est.ci95[1] - est.ci95[0]
    out = {key: value / max(1, defined) for key, value in sums.items()}
    out["undefined"] = studies - defined
    return out


def gender_judge_study(
    rng: np.random.Generator, kind: str, n_prompts: int = 50, per_prompt: int = 20
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One gender population as ``--detectors`` draws it: (prompt ids, human vectors, the judge's
    (p_male, p_female), its verdicts' vectors, its verdict codes 0 male / 1 female / 2 can't
    tell). ``calibrated``: the good detector's verdicts, with P(class | verdict) over the study as
    probabilities (calibrated on the study's images); ``class-dependent``: the class-dependent
    detector's verdicts, 0.8 on the verdict and 0.1 on each other answer (not calibrated)."""
    detector = "good" if kind == "calibrated" else "class-dependent"
    codes, hard, y, outputs = detector_population(rng, detector, n_prompts, per_prompt)
    if kind == "calibrated":
        human = np.where(y[:, 0] == 1, 0, np.where(y[:, 1] == 1, 1, 2))
        joint = DETECTORS[detector] * np.bincount(human, minlength=3)[:, None]
        q = (joint / joint.sum(axis=0, keepdims=True)).T[outputs]
    else:
        q = 0.8 * np.eye(3)[outputs] + 0.1 * (1 - np.eye(3)[outputs])
    return codes, y, q[:, :2], hard, outputs


def gender_judge_cell(
    kind: str, fraction: float, studies: int, seed: int, n_boot: int = 200, n_prompts: int = 50
) -> dict[str, float]:
    """Coverage and mean width of the model bias score's interval, with a gender judge's
    probabilities (``soft``) and with its verdicts (``hard``) as the detector vectors, from the
    same labels, over ``studies`` studies (``metrics.ppi.estimate_model_bias``, as the gender
    estimate calls it: the verdict codes the output)."""
    rng = np.random.default_rng([seed, int(fraction * 1000), len(kind)])
    sums: dict[str, float] = {}
    for s in range(studies):
        codes, y, soft, hard, outputs = gender_judge_study(rng, kind, n_prompts)
        truth = _score(codes, y)
        pi = np.full(codes.size, fraction)
        xi = ppi_design.draw_bernoulli(pi, [seed, s, int(fraction * 1000)])
        for name, f in (("soft", soft), ("hard", hard)):
            score = ppi.estimate_model_bias(
                LabelledSample(codes, f, observed(y, xi), xi, pi, detector_outputs=outputs),
                n_boot=n_boot,
                seed=s,
            ).model_bias_score
            assert score.ci95 is not None
            lo, hi = score.ci95
            sums[f"cover_{name}"] = sums.get(f"cover_{name}", 0.0) + (lo <= truth <= hi)
            sums[f"width_{name}"] = sums.get(f"width_{name}", 0.0) + hi - lo
    return {key: value / studies for key, value in sums.items()}


def run_judge(studies: int, fractions: list[float], seed: int) -> None:
    print(f"--judge: 3 groups x {N_PER_GROUP} items, 3 answers, {studies} studies per cell")
    print(
        f"{'judge':16} {'labels':>6} {'estimand':8} {'cover_p':>7} {'cover_h':>7} {'width_p':>7} "
        f"{'width_h':>7} {'ratio':>6}"
    )
    for kind in JUDGES:
        for fraction in fractions:
            row = judge_cell(kind, fraction, studies, seed)
            for estimand in ("share", "gap"):
                soft, hard = row[f"width_{estimand}_soft"], row[f"width_{estimand}_hard"]
                print(
                    f"{kind:16} {fraction:6.0%} {estimand:8} {row[f'cover_{estimand}_soft']:7.3f} "
                    f"{row[f'cover_{estimand}_hard']:7.3f} {soft:7.3f} {hard:7.3f} {soft / hard:6.2f}",
                    flush=True,
                )
    print(f"gender: 50 prompts x 20 images, the model bias score, {max(1, studies // 2)} studies per cell")
    for kind in JUDGES:
        for fraction in fractions:
            row = gender_judge_cell(kind, fraction, max(1, studies // 2), seed)
            print(
                f"{kind:16} {fraction:6.0%} {'score':8} {row['cover_soft']:7.3f} {row['cover_hard']:7.3f} "
                f"{row['width_soft']:7.3f} {row['width_hard']:7.3f} {row['width_soft'] / row['width_hard']:6.2f}",
                flush=True,
            )


FRACTIONS = "0.05,0.1,0.2,0.4"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=300, help="simulated studies per budget")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap replicates per estimate")
    parser.add_argument("--budgets", default="200,400,800", help="labels per study, comma-separated")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--extra", action="store_true", help="also balanced and misspecified studies at 400")
    parser.add_argument(
        "--detectors", action="store_true", help="the detectors' table: three detectors, four budgets"
    )
    parser.add_argument(
        "--fractions",
        default=FRACTIONS,
        help="label fractions (--detectors; --generic: 0.05,0.1,0.2 unless given)",
    )
    parser.add_argument("--no-tuning", action="store_true", help="λ = 1 (the untuned estimator)")
    parser.add_argument(
        "--generic",
        action="store_true",
        help="attributes, pair_change, questions and objects estimands",
    )
    parser.add_argument("--census", action="store_true", help="the census check of every protocol")
    parser.add_argument(
        "--judge", action="store_true", help="a judge's probabilities vs its hard answers as the prediction"
    )
    parser.add_argument(
        "--protocols",
        default="",
        help=f"--generic: only these protocols, comma-separated (of {', '.join(GENERIC_PROTOCOLS)}); "
        f"--detectors: only these detectors (of {', '.join(DETECTORS)})".replace("%", "%%"),
    )
    args = parser.parse_args()
    if args.census:
        run_census(args.seed)
        return
    if args.judge:
        fractions = (
            [0.05, 0.1, 0.2] if args.fractions == FRACTIONS else [float(x) for x in args.fractions.split(",")]
        )
        run_judge(args.studies if args.studies != 300 else 200, fractions, args.seed)
        return
    if args.generic:
        only = [p for p in args.protocols.split(",") if p]
        fractions = (
            [0.05, 0.1, 0.2] if args.fractions == FRACTIONS else [float(x) for x in args.fractions.split(",")]
        )
        run_generic(args.studies if args.studies != 300 else 200, fractions, args.seed, only)
        return
    if args.detectors:
        fractions = [float(x) for x in args.fractions.split(",")]
        run_detectors(
            args.studies if args.studies != 300 else 200,
            args.boot,
            fractions,
            not args.no_tuning,
            args.seed,
            [d for d in args.protocols.split(",") if d],
        )
        return
    budgets = [int(b) for b in args.budgets.split(",")]
    run("paper-like study", budgets, args.studies, args.boot, 0.1, False, args.seed)
    if args.extra:
        run(
            "half the prompts balanced",
            [400],
            max(args.studies // 2, 1),
            args.boot,
            0.5,
            False,
            args.seed + 1,
        )
        run("misspecified detector", [400], max(args.studies // 2, 1), args.boot, 0.1, True, args.seed + 2)


if __name__ == "__main__":
    main()
