"""``metrics.calibration`` worked by hand and against scikit-learn's ``brier_score_loss``;
the expected calibration error against a direct numpy formulation of Guo et al.'s binning."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss

from metrics import calibration as cal

VALUES3 = ["young", "middle", "old"]
ROWS3 = [
    {"young": 0.7, "middle": 0.2, "old": 0.1},
    {"young": 0.1, "middle": 0.8, "old": 0.1},
    {"young": 0.3, "middle": 0.3, "old": 0.4},
    {"young": 0.05, "middle": 0.05, "old": 0.9},
    {"young": 0.5, "middle": 0.25, "old": 0.25},
]
TRUTH3 = ["young", "middle", "young", "old", "old"]


def test_brier_score_worked_by_hand_for_three_answers():
    # (.3² + .2² + .1²) + (.1² + .2² + .1²) + (.7² + .3² + .4²) + (.05² + .05² + .1²)
    # + (.5² + .25² + .75²) = .14 + .06 + .74 + .015 + .875 = 1.83; / 5 = .366
    assert cal.brier_score(ROWS3, TRUTH3, VALUES3) == pytest.approx(0.366)


def test_brier_score_of_two_answers_is_the_binary_score():
    rows = [{"yes": 0.8, "no": 0.2}, {"yes": 0.3, "no": 0.7}, {"yes": 0.6, "no": 0.4}]
    # (.2² + .3² + .6²) / 3 = (.04 + .09 + .36) / 3
    assert cal.brier_score(rows, ["yes", "no", "no"], ["yes", "no"]) == pytest.approx(0.49 / 3)


@pytest.mark.parametrize("n_values", [2, 3, 5])
def test_brier_score_equals_scikit_learn(n_values):
    rng = np.random.default_rng(n_values)
    values = [f"a{i}" for i in range(n_values)]
    p = rng.dirichlet(np.ones(n_values), size=40)
    truth = list(rng.choice(values, size=40))
    rows = [dict(zip(values, row, strict=True)) for row in p]
    expected = (
        brier_score_loss(truth, p, labels=values)
        if n_values > 2
        else brier_score_loss([t == values[1] for t in truth], p[:, 1])
    )
    assert cal.brier_score(rows, truth, values) == pytest.approx(expected, rel=1e-12)


def test_ece_worked_by_hand():
    # Top-label confidences .7 (bin 7, right), .8 (bin 8, right), .4 (bin 4: "old", wrong),
    # .9 (bin 9, right), .5 (bin 5: "young", wrong). One item per bin:
    # ECE = (|1-.7| + |1-.8| + |0-.4| + |1-.9| + |0-.5|) / 5 = 1.5 / 5 = .3
    assert cal.expected_calibration_error(ROWS3, TRUTH3, VALUES3) == pytest.approx(0.3)
    bins = cal.reliability_bins(ROWS3, TRUTH3, VALUES3)
    assert [b.n for b in bins] == [0, 0, 0, 1, 1, 0, 1, 1, 1, 0]  # (.3, .4] holds .4; .5 in (.4, .5]
    assert bins[3].accuracy == 0.0
    assert bins[3].confidence == pytest.approx(0.4)
    assert bins[0].accuracy is None


def _numpy_ece(p: np.ndarray, truth: np.ndarray, bins: int = 10) -> float:
    confidence = p.max(axis=1)
    correct = p.argmax(axis=1) == truth
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        inside = (confidence > lo) & (confidence <= hi)
        if inside.any():
            total += inside.mean() * abs(correct[inside].mean() - confidence[inside].mean())
    return total


def test_ece_equals_a_direct_numpy_binning():
    rng = np.random.default_rng(7)
    values = ["a", "b", "c", "d"]
    p = rng.dirichlet(np.full(4, 0.5), size=200)
    truth = rng.integers(0, 4, size=200)
    rows = [dict(zip(values, row, strict=True)) for row in p]
    found = cal.expected_calibration_error(rows, [values[t] for t in truth], values)
    assert found == pytest.approx(_numpy_ece(p, truth), rel=1e-12)


def test_a_perfectly_calibrated_sure_judge_has_zero_error_and_degenerate_cases_are_explicit():
    rows = [{"yes": 1.0}, {"no": 1.0}]  # a missing answer has probability 0
    assert cal.brier_score(rows, ["yes", "no"], ["yes", "no"]) == 0.0
    assert cal.expected_calibration_error(rows, ["yes", "no"], ["yes", "no"]) == 0.0
    assert cal.calibration([], [], ["yes", "no"]) == cal.Calibration(
        0, None, None, cal.calibration([], [], ["yes", "no"]).bins
    )
    assert cal.brier_score([{"yes": 2, "no": 2}], ["yes"], ["yes", "no"]) == pytest.approx(0.25)  # normalised
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        cal.brier_score([{"yes": 1.0}], ["maybe"], ["yes", "no"])
    with pytest.raises(ValueError, match="sum to 0"):
        cal.brier_score([{"other": 1.0}], ["yes"], ["yes", "no"])
    with pytest.raises(ValueError, match="one per item"):
        cal.expected_calibration_error([], ["yes"], ["yes", "no"])
