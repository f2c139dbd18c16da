from __future__ import annotations

import pytest

from metrics.consensus import MAJORITY, UNANIMOUS, agreed_answer


def test_unanimous_needs_every_label_equal():
    assert agreed_answer(["male", "male"], needed=2, rule=UNANIMOUS) == "male"
    assert agreed_answer(["male", "female"], needed=2, rule=UNANIMOUS) is None


def test_nothing_is_settled_before_n_labels_exist():
    assert agreed_answer(["male"], needed=2, rule=UNANIMOUS) is None
    assert agreed_answer([], needed=1, rule=MAJORITY) is None


def test_majority_of_three_settles_a_two_one_split():
    assert agreed_answer(["yes", "no", "yes"], needed=3, rule=MAJORITY) == "yes"


@pytest.mark.parametrize("values", [["yes", "no"], ["a", "b", "c"], ["a", "a", "b", "b"]])
def test_majority_leaves_ties_disputed(values):
    assert agreed_answer(values, needed=len(values), rule=MAJORITY) is None


def test_unknown_rule_is_an_error_naming_the_rules():
    with pytest.raises(ValueError, match="unanimous"):
        agreed_answer(["a"], needed=1, rule="plurality")
