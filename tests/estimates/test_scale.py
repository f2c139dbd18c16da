"""Sampling rounds and estimates at scale: no statement carries one value per item of
a round, so a round of a million items stays under SQLite's variable limit."""

from __future__ import annotations

import pytest

from estimates.services import sampling_round_create
from protocols.gender import estimates as gframe
from studies.models import Item
from tests.sqlite_limits import sqlite_variable_limit

pytestmark = pytest.mark.django_db

LIMIT = 30  # fewer bound values per statement than the round has items (48)


def test_a_round_larger_than_the_variable_limit_is_drawn_and_estimated(settings, sampled_study):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    with sqlite_variable_limit(LIMIT):
        sampling_round = sampling_round_create(study=sampled_study.study, detector="fake", budget=48, seed=0)
    assert Item.objects.filter(study=sampled_study.study, queue=2).count() == 48
    sampled_study.finish(sampling_round)  # the test's own labels, as the annotators would give them
    with sqlite_variable_limit(LIMIT):
        frame = gframe.gender_frame(sampled_study.study, "fake", "1")
        estimate = gframe.bias_estimate(sampled_study.study, "fake", n_boot=20)
    assert len(frame.items) == 48
    assert all(model.estimate is not None for model in estimate.models)
