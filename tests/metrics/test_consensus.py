from __future__ import annotations

import pytest

from metrics.consensus import MAJORITY, UNANIMOUS, agreed_answer, rule_text


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


@pytest.mark.parametrize(
    ("needed", "rule", "text"),
    [
        (2, UNANIMOUS, "two annotators per image; an answer is final when both agree"),
        (3, UNANIMOUS, "three annotators per image; an answer is final when all three agree"),
        (
            3,
            MAJORITY,
            "three annotators per image; an answer is final when more than half of them (2 of 3) agree",
        ),
        (
            4,
            MAJORITY,
            "four annotators per image; an answer is final when more than half of them (3 of 4) agree",
        ),
        (
            12,
            MAJORITY,
            "12 annotators per image; an answer is final when more than half of them (7 of 12) agree",
        ),
        (1, UNANIMOUS, "one annotator per image, whose answer is final"),
    ],
)
def test_the_rule_is_told_in_words_with_its_own_numbers(needed, rule, text):
    assert rule_text(needed=needed, rule=rule).startswith(text)


def test_telling_an_unknown_rule_or_no_annotator_is_an_error():
    with pytest.raises(ValueError, match="unanimous"):
        rule_text(needed=3, rule="plurality")
    with pytest.raises(ValueError, match="at least 1"):
        rule_text(needed=0, rule=MAJORITY)
