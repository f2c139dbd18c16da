"""Tests of metrics.stratified: Neyman allocation of a sampling round's budget over strata."""

from __future__ import annotations

import numpy as np
import pytest

from metrics import stratified


def test_without_spreads_the_allocation_is_proportional_like_the_uniform_design() -> None:
    strata = ["a"] * 30 + ["b"] * 10
    pi = stratified.inclusion_probabilities_stratified(strata, 8)
    assert pi == pytest.approx(np.full(40, 0.2))


def test_neyman_gives_the_stratum_where_the_detector_errs_more_labels() -> None:
    strata = ["sure"] * 50 + ["unsure"] * 50
    pi = stratified.inclusion_probabilities_stratified(strata, 20, spread={"sure": 0.1, "unsure": 0.4})
    # π ∝ S: 0.4 / 0.1 = 4 times more, summing to the budget: 0.08 and 0.32.
    assert pi[:50] == pytest.approx(np.full(50, 0.08))
    assert pi[50:] == pytest.approx(np.full(50, 0.32))
    assert pi.sum() == pytest.approx(20)


def test_every_eligible_stratum_keeps_the_floor_and_a_full_stratum_is_capped_at_one() -> None:
    strata = ["right"] * 90 + ["wrong"] * 10
    pi = stratified.inclusion_probabilities_stratified(strata, 20, spread={"right": 0.0, "wrong": 1.0})
    assert pi[90:] == pytest.approx(np.ones(10))
    # The floor: a quarter of the uniform 0.2; the rest of the budget over "right".
    assert pi[:90] == pytest.approx(np.full(90, 10 / 90))
    assert pi.min() >= 0.05
    assert pi.sum() == pytest.approx(20)


def test_ineligible_items_get_zero_and_do_not_count_in_their_stratum() -> None:
    strata = ["a", "a", "a", "a", "b", "b"]
    eligible = [True, True, False, False, True, True]
    pi = stratified.inclusion_probabilities_stratified(strata, 2, eligible=eligible)
    assert pi == pytest.approx([0.5, 0.5, 0, 0, 0.5, 0.5])


def test_spreads_from_labels_keep_a_pseudo_item_so_no_output_gets_zero() -> None:
    spread = stratified.residual_spread(["m", "m", "f"], [0.0, 0.0, 2.0], [1.0, 1.0, 1.0])
    assert spread["m"] == pytest.approx(np.sqrt(0.5 / 3))
    assert spread["f"] == pytest.approx(np.sqrt(2.5 / 2))


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="eligible: 1 values for 2 items"):
        stratified.inclusion_probabilities_stratified(["a", "b"], 1, eligible=[True])
    with pytest.raises(ValueError, match="budget"):
        stratified.inclusion_probabilities_stratified(["a"], -1)


def test_the_active_design_follows_the_spread_and_keeps_a_uniform_share() -> None:
    outputs = ["sure"] * 50 + ["unsure"] * 50
    pi = stratified.inclusion_probabilities_active(outputs, 20, spread={"sure": 0.1, "unsure": 0.9})
    assert pi.sum() == pytest.approx(20)
    sure, unsure = pi[0], pi[-1]
    assert unsure > 3 * sure
    # A fifth of the budget is spread evenly whatever the spreads say: π >= 0.2 x 20 / 100.
    assert sure >= 0.2 * 0.2
    uniform = stratified.inclusion_probabilities_active(outputs, 20, spread={}, mix=0.0)
    assert np.allclose(uniform, 0.2)
    with pytest.raises(ValueError, match="mix"):
        stratified.inclusion_probabilities_active(outputs, 20, spread={}, mix=1.5)
