"""Truth inference over crowd-kit: answers, posteriors, reliability and confusion per annotator."""

from __future__ import annotations

import pytest

from metrics.truth import crowdkit_fit, infer_truth

# Four careful annotators agree on every unit; "r" answers the opposite of them on every unit.
TRUTH = {f"u{i}": "ab"[i % 2] for i in range(12)}
ROWS = [(unit, worker, answer) for unit, answer in TRUTH.items() for worker in ("a", "b", "c", "d")] + [
    (unit, "r", "b" if answer == "a" else "a") for unit, answer in TRUTH.items()
]


# MACE's default fit (10 restarts) takes seconds whatever the size: the slow tier runs it.
@pytest.mark.parametrize(
    "method", ["dawid_skene", "glad", pytest.param("mace", marks=pytest.mark.simulation)]
)
def test_each_method_finds_the_truth_and_the_unreliable_annotator(method):
    inference = infer_truth(ROWS, method, ["a", "b"])
    assert inference.answers == TRUTH
    assert min(inference.posteriors.values()) > 0.9
    assert inference.reliability["r"] < 0.1 < 0.9 < inference.reliability["a"]
    answers, matrix = inference.confusion["r"]
    assert answers == ("a", "b")
    assert matrix[0][1] == pytest.approx(6, abs=0.5)  # true a, said b


def test_the_answers_and_posteriors_are_crowdkits_own():
    inference = infer_truth(ROWS, "dawid_skene", ["a", "b"])
    labels, probas = crowdkit_fit(ROWS, "dawid_skene")
    units = list(TRUTH)
    for task, label in labels.items():
        assert inference.answers[units[task]] == label
        assert inference.posteriors[units[task]] == pytest.approx(float(probas.loc[task, label]))


def test_no_rows_and_unknown_methods():
    assert infer_truth([], "dawid_skene").answers == {}
    with pytest.raises(ValueError, match="Unknown truth-inference method"):
        infer_truth(ROWS, "wawa")
