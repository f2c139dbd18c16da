"""A VLM judge as the detector of a few-label estimate, by simulation (``bench/bench_estimator.py
--judge``): with calibrated probabilities as the prediction the interval is narrower than with
the judge's hard answers from the same labels, at the same coverage; with a judge whose errors
depend on the true class the interval still covers. The same for a gender study's model bias
score (``gender_judge_cell``: the judge's male / female probabilities as detector vectors)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_estimator as bench  # a script of bench/, importable once that is on the path


def test_calibrated_probabilities_narrow_the_interval_of_a_share_few_studies() -> None:
    row = bench.judge_cell("calibrated", 0.2, studies=10, seed=3, n_per_group=60, gap=False)
    assert row["width_share_soft"] < row["width_share_hard"], row
    assert row["cover_share_soft"] >= 0.9, row


@pytest.mark.simulation
def test_calibrated_probabilities_narrow_the_interval_at_equal_coverage() -> None:
    row = bench.judge_cell("calibrated", 0.1, studies=120, seed=5, gap=False)
    assert row["cover_share_soft"] >= 0.93, row
    assert row["cover_share_hard"] >= 0.93, row
    assert row["width_share_soft"] < 0.97 * row["width_share_hard"], row


@pytest.mark.simulation
def test_a_judge_whose_errors_depend_on_the_true_class_still_covers() -> None:
    row = bench.judge_cell("class-dependent", 0.1, studies=100, seed=7)
    for key in ("cover_share_soft", "cover_share_hard", "cover_gap_soft", "cover_gap_hard"):
        assert row[key] >= 0.93, row


@pytest.mark.parametrize("kind", ["calibrated", "class-dependent"])
def test_a_gender_judges_probabilities_give_an_interval_that_covers_few_studies(kind: str) -> None:
    row = bench.gender_judge_cell(kind, 0.2, studies=2, seed=3, n_boot=50, n_prompts=20)
    assert row["cover_soft"] == 1.0, row
    assert 0 < row["width_soft"] < 1, row


@pytest.mark.simulation
def test_a_gender_judge_whose_errors_depend_on_the_true_class_still_covers() -> None:
    row = bench.gender_judge_cell("class-dependent", 0.1, studies=60, seed=7)
    assert row["cover_soft"] >= 0.93, row
    assert row["cover_hard"] >= 0.93, row
