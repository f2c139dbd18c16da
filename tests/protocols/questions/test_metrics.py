"""``metrics.questions`` against its references: SciPy's ``chi2_contingency`` without continuity
correction (χ², dof, p) and its ``association`` (Cramér's V), scikit-learn's
``cohen_kappa_score``, and the Wilson interval worked by hand and by statsmodels' formula."""

from __future__ import annotations

import math

import pytest
from scipy.stats import chi2_contingency
from scipy.stats.contingency import association
from sklearn.metrics import cohen_kappa_score

from metrics import questions as qm

TABLES = [
    [[10, 5, 3], [4, 12, 6]],
    [[7, 3], [2, 9]],  # 2 x 2: scipy would apply Yates' correction unless told not to
    [[20, 1, 0, 4], [5, 5, 5, 5], [1, 9, 2, 0]],
]


@pytest.mark.parametrize("table", TABLES)
def test_independence_test_equals_scipy_without_continuity_correction(table):
    expected = chi2_contingency(table, correction=False)
    found = qm.independence_test(table)
    assert found.chi2 == pytest.approx(expected.statistic, rel=1e-12)
    assert found.dof == expected.dof
    assert found.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert found.cramers_v == pytest.approx(association(table, method="cramer", correction=False), rel=1e-12)


def test_an_answer_nobody_gave_is_left_out_of_the_test_as_scipy_needs():
    with_zero = [[10, 0, 3], [4, 0, 6]]
    expected = chi2_contingency([[10, 3], [4, 6]], correction=False)
    found = qm.independence_test(with_zero)
    assert (found.chi2, found.dof) == (pytest.approx(expected.statistic), expected.dof)


def test_one_group_or_one_answer_leaves_nothing_to_test():
    assert qm.independence_test([[3, 4, 5]]) == qm.IndependenceTest(0.0, 0, 1.0, 0.0, 12)
    assert qm.independence_test([[3, 0], [4, 0]]).dof == 0
    assert qm.independence_test([]).n == 0


def test_wilson_interval_worked_by_hand():
    # 8 of 10: p = .8, z² = 3.8415; centre = (.8 + .19207)/1.38415 = .71673,
    # half = 1.96 sqrt(.016 + .0096037)/1.38415 = .22657 → [.4902, .9433].
    lo, hi = qm.wilson_interval(8, 10)
    assert lo == pytest.approx(0.4901625, abs=1e-6)
    assert hi == pytest.approx(0.9433178, abs=1e-6)
    assert qm.wilson_interval(0, 5)[0] == 0.0
    assert qm.wilson_interval(5, 5)[1] == 1.0
    assert qm.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="between 0 and n"):
        qm.wilson_interval(6, 5)


def test_answer_shares_with_max_gap():
    comparison = qm.answer_shares(
        {"dark": ["yes", "yes", "no", "no"], "light": ["yes", "yes", "yes", "no"], "none": []},
        ["yes", "no", "n/a"],
    )
    assert set(comparison.groups) == {"dark", "light"}  # a group without answers has no share
    assert comparison.groups["light"].shares == {"yes": 0.75, "no": 0.25, "n/a": 0.0}
    assert comparison.max_gap == {"yes": 0.25, "no": 0.25, "n/a": 0.0}
    expected = chi2_contingency([[2, 2], [3, 1]], correction=False)
    assert comparison.test.chi2 == pytest.approx(expected.statistic)
    with pytest.raises(ValueError, match="'maybe' is not one of"):
        qm.group_shares(["maybe"], ["yes", "no"])


@pytest.mark.parametrize(
    ("truth", "predicted"),
    [
        (["a", "b", "a", "c", "b", "a"], ["a", "b", "b", "c", "a", "a"]),
        (["yes", "no", "yes", "yes"], ["yes", "yes", "yes", "yes"]),
        (["x", "y", "z", "x", "y"], ["y", "z", "x", "x", "y"]),
    ],
)
def test_cohen_kappa_equals_scikit_learn(truth, predicted):
    assert qm.cohen_kappa(truth, predicted) == pytest.approx(cohen_kappa_score(truth, predicted), rel=1e-12)


@pytest.mark.filterwarnings("ignore")  # scikit-learn warns that kappa is undefined here
def test_cohen_kappa_is_none_where_chance_agreement_is_one():
    assert qm.cohen_kappa(["a", "a"], ["a", "a"]) is None  # scikit-learn: nan
    assert math.isnan(cohen_kappa_score(["a", "a"], ["a", "a"]))
    assert qm.cohen_kappa([], []) is None
    assert qm.accuracy([], []) is None
