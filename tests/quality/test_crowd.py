"""A small simulated crowd end to end: gold flags the random clickers, excluding them raises the
finals' accuracy, Dawid-Skene beats majority vote and the study stores crowd-kit's answers."""

from __future__ import annotations

import pytest

from tests.quality.crowd import crowd_build, crowd_run


@pytest.mark.simulation
@pytest.mark.django_db
def test_a_small_crowd_is_cleaned_by_gold_exclusion_and_truth_inference():
    crowd = crowd_build(
        slug="crowd", items=100, annotators=6, random_clickers=2, labels_per_item=3, gold_rate=0.2, seed=3
    )
    figures = crowd_run(crowd)
    assert figures["gold_responses"] > 0
    assert figures["flagged"] == crowd.random_clickers
    assert figures["least_reliable"] == crowd.random_clickers
    assert figures["stored_equals_crowdkit"]
    assert figures["dawid_skene_accuracy"] >= figures["majority_accuracy"]
    assert figures["majority_accuracy_after"] > figures["majority_accuracy"]
    assert figures["gold_in_labels"] == 0
    assert figures["over_full"] == 0
