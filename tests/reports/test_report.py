"""The gender report on the fixture study of conftest.py, worked by hand."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from detectors.kinds import KIND_OBJECTS
from detectors.models import Prediction
from protocols.gender.analysis import gender_question
from reports.analyses import analysis_for
from reports.selectors import Scope, latest_detector_versions
from studies.models import Question
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory, StudyFactory
from tests.reports import dashboard_data
from tests.reports.dashboard_data import predict


def bias_report(study, *, t2i_model=None, detector=None, bootstrap=1000, seed=0) -> dict:
    return analysis_for("gender").build(
        Scope(study, t2i_model=t2i_model), detector=detector, bootstrap=bootstrap, seed=seed
    )


@pytest.fixture
def report(report_study):
    return bias_report(report_study.study, bootstrap=200, seed=1)


# ------------------------------------------------------------------ coverage and agreement


def test_coverage_counts_items_and_final_labels(report):
    assert report["coverage"] == {"images": 15, "final_labels": 14}


def test_agreement_of_the_doubly_labelled_items_is_worked_by_hand(report):
    # A: m m f lq, B: m m m lq -> p_o = 3/4, p_e = (2*3 + 1*1) / 16 = 7/16, kappa = 5/9.
    assert report["agreement"]["n_images"] == 4
    assert report["agreement"]["cohen_kappa"] == pytest.approx(5 / 9)


# ------------------------------------------------------------------ human side


def test_human_scores_of_the_fixture_are_worked_by_hand(report):
    sdxl = report["human"]["sdxl"]
    # doctor (3 - 1) / 4 = 0.5, nurse (0 - 2) / 2 = -1, gym has no clear image: mean(0.5, 1).
    assert sdxl["model_bias_score"] == pytest.approx(0.75)
    assert sdxl["categories"] == {"place": None, "profession": pytest.approx(0.75)}
    assert sdxl["label_shares"] == {"male": 0.3, "female": 0.3, "low_quality": 0.3, "other": 0.1}
    assert sdxl["n_images"] == 10
    assert [(p["word"], p["prompt_bias_score"]) for p in sdxl["prompts"]] == [
        ("gym", None),
        ("doctor", 0.5),
        ("nurse", -1.0),
    ]
    doctor = sdxl["prompts"][1]
    assert (doctor["n_male"], doctor["n_female"], doctor["n_low_quality"], doctor["n_other"]) == (3, 1, 1, 0)
    assert report["human"]["sd3"]["model_bias_score"] == 0.0
    assert report["human"]["sd3"]["label_shares"]["male"] == 0.5


def test_human_interval_is_a_pair_in_unit_range_around_the_score(report):
    lo, hi = report["human"]["sdxl"]["ci95"]
    assert 0.0 <= lo <= 0.75 <= hi <= 1.0


def test_the_vocabulary_comes_from_the_question_not_a_built_in_list(db):
    """A study whose gender question says man / woman / unsure: the report counts those."""
    study = StudyFactory(slug="words")
    Question.objects.filter(study=study, key="gender").update(
        choices=[
            {"value": "woman", "name": "Woman", "key": "w", "clear": True},
            {"value": "man", "name": "Man", "key": "m", "clear": True},
            {"value": "unsure", "name": "Unsure", "key": "u"},
        ]
    )
    prompt = PromptFactory(study=study, word="nurse")
    for value in ("woman", "woman", "woman", "man", "unsure"):
        FinalLabelFactory(item=ItemFactory(prompt=prompt), value=value)
    report = bias_report(study, bootstrap=0)
    sdxl = report["human"]["sdxl"]
    # The first clear answer counts positive: (3 woman - 1 man) / 4.
    assert sdxl["prompts"][0]["prompt_bias_score"] == 0.5
    assert sdxl["label_shares"] == {"woman": 0.6, "man": 0.2, "unsure": 0.2}
    assert {k for k in sdxl["prompts"][0] if k.startswith("n_")} == {"n_woman", "n_man", "n_unsure"}


# ------------------------------------------------------------------ detectors


def test_detector_uses_the_version_run_last(report):
    assert report["detectors"]["fake"]["version"] == "2"


@pytest.mark.django_db
def test_the_latest_version_in_the_study_is_found_past_newer_predictions_of_another_study(monkeypatch):
    """The run walk (``detector_runs_in_scope``) reads a run newest first, a page at a time:
    pages of another study's predictions are passed over, and a run only another study used is
    not reported."""
    import reports.selectors

    monkeypatch.setattr(reports.selectors, "RUN_WALK_PAGE", 2)
    mine, other = StudyFactory(slug="mine"), StudyFactory(slug="other")
    mine_items = [ItemFactory(study=mine) for _ in range(2)]
    other_items = [ItemFactory(study=other) for _ in range(5)]
    for item in mine_items:
        predict(item, "fake", "old", "male")
    for item in other_items:
        predict(item, "fake", "old", "male")
    for item in mine_items:
        predict(item, "fake", "new", "male")
    for item in other_items:
        predict(item, "fake", "new", "male")
        predict(item, "fake", "newest", "female")
    assert latest_detector_versions(Scope(mine)) == {"fake": "new"}
    assert latest_detector_versions(Scope(other)) == {"fake": "newest"}
    runs = reports.selectors.detector_runs_in_scope(Scope(mine))
    newest_of_mine = Prediction.objects.filter(image__item_images__item__study=mine, version="new").latest(
        "pk"
    )
    assert [(version, last) for _, version, last in runs] == [
        ("new", newest_of_mine.pk),
        (
            "old",
            Prediction.objects.filter(image__item_images__item__study=mine, version="old").latest("pk").pk,
        ),
    ]


@pytest.mark.django_db
def test_a_run_only_another_study_used_costs_one_question_not_a_walk_through_its_predictions(
    monkeypatch, django_assert_max_num_queries
):
    """A small study beside a big one: the big one's run is not walked back page by page to
    find that the small study has none of it."""
    import reports.selectors

    monkeypatch.setattr(reports.selectors, "RUN_WALK_PAGE", 2)
    small, big = StudyFactory(slug="small"), StudyFactory(slug="big")
    for _ in range(40):  # 20 pages of 2, and more as the pages double
        predict(ItemFactory(study=big), "fake", "v1", "male")
    ItemFactory(study=small)
    # The run (one seek, and the seek past it) and whether any of its predictions is in scope.
    with django_assert_max_num_queries(3):
        assert reports.selectors.detector_runs_in_scope(Scope(small)) == []
    assert [run[:2] for run in reports.selectors.detector_runs_in_scope(Scope(big))] == [("fake", "v1")]


@pytest.mark.django_db
def test_distinct_by_seeks_finds_every_pair_in_order_one_seek_each():
    import reports.selectors

    study = StudyFactory(slug="seeks")
    items = [ItemFactory(study=study) for _ in range(3)]
    for item in items:
        for detector, version in (("b", "1"), ("a", "2"), ("a", "10"), ("c", "1")):
            predict(item, detector, version, "male")
    pairs = reports.selectors.distinct_by_seeks(Prediction.objects.all(), ("detector", "version"))
    assert pairs == [("a", "10"), ("a", "2"), ("b", "1"), ("c", "1")]
    assert reports.selectors.distinct_by_seeks(Prediction.objects.filter(detector="z"), ("detector",)) == []


def test_the_version_written_last_wins_even_when_it_is_named_lower(report_study):
    predict(report_study.items["sdxl_gym"][0], "fake", "0-rerun", "male")
    assert latest_detector_versions(Scope(report_study.study)) == {"blind": "0", "fake": "0-rerun"}
    report = bias_report(report_study.study, bootstrap=0)
    assert report["detectors"]["fake"]["version"] == "0-rerun"
    assert report["detectors"]["fake"]["filtering"]["fp"] == 1  # only the re-run item counts
    assert report["detectors"]["fake"]["filtering"]["tp"] == 0


def test_detector_filtering_and_accuracy_are_worked_by_hand(report):
    fake = report["detectors"]["fake"]
    # Clear & kept: 4 (sdxl doctor) + 1 (nurse) + 4 (sd3) = 9; clear & filtered: 1 (nurse);
    # not clear & kept: the low-quality doctor item; not clear & filtered: other + 2 gym.
    assert fake["filtering"] == {
        "precision": 0.9,
        "recall": 0.9,
        "f1": pytest.approx(0.9),
        "filter_rate": 0.75,
        "tp": 9,
        "fp": 1,
        "fn": 1,
        "tn": 3,
    }
    # Male & kept: 5, 4 called male; female & kept: 4, 3 called female.
    assert fake["accuracy"]["male"] == 0.8
    assert fake["accuracy"]["female"] == 0.75
    assert fake["accuracy"]["overall"] == pytest.approx(7 / 9)


def test_detector_bias_against_humans_is_worked_by_hand(report):
    sdxl = report["detectors"]["fake"]["per_model"]["sdxl"]
    # fake: doctor (3 - 2) / 5 = 0.2, nurse -1, gym none -> 0.6; humans 0.75 -> -20 %.
    assert sdxl["model_bias_score"] == pytest.approx(0.6)
    assert sdxl["pct_diff"] == pytest.approx(-20.0)
    assert sdxl["prompt_bias_score_difference"] == pytest.approx((0.3 + 0.0) / 2)
    assert sdxl["human_model_bias_score"] == pytest.approx(0.75)
    assert sdxl["n_images"] == 10
    sd3 = report["detectors"]["fake"]["per_model"]["sd3"]
    # Humans see no bias on sd3 (score 0): a percentage of 0 is undefined.
    assert sd3["model_bias_score"] == pytest.approx(0.5)
    assert sd3["pct_diff"] is None
    assert sd3["prompt_bias_score_difference"] == pytest.approx(0.5)
    assert sd3["n_images"] == 4  # the item without a final label is left out


def test_failed_predictions_do_not_count(report):
    blind = report["detectors"]["blind"]
    assert blind["filtering"]["tp"] + blind["filtering"]["fp"] + blind["filtering"]["tn"] == 0
    assert blind["filtering"]["fn"] == 1
    assert blind["filtering"]["precision"] is None
    assert blind["filtering"]["filter_rate"] is None
    assert blind["accuracy"]["overall"] is None
    assert blind["per_model"]["sdxl"]["model_bias_score"] is None


def test_a_prediction_belongs_to_the_file_and_counts_for_every_item_using_it(report_study):
    """Two items of the study share one image file: its one prediction counts for both."""
    doctor = report_study.items["sdxl_doctor"][0]
    from tests.factories import image_of

    twin = ItemFactory(prompt=doctor.prompt, t2i_model="sdxl", image=image_of(doctor))
    FinalLabelFactory(item=twin, value="male")
    report = bias_report(report_study.study, bootstrap=0)
    assert report["detectors"]["fake"]["filtering"]["tp"] == 10
    assert report["detectors"]["fake"]["per_model"]["sdxl"]["n_images"] == 11


def test_other_kinds_of_prediction_on_the_same_files_are_ignored(report_study):
    from tests.factories import PredictionFactory, image_of

    item = report_study.items["sdxl_gym"][0]
    PredictionFactory(image=image_of(item), detector="yolo", kind=KIND_OBJECTS, output={"objects": []})
    assert "yolo" not in bias_report(report_study.study, bootstrap=0)["detectors"]


def test_detector_interval_is_of_the_percentage_difference(report):
    lo, hi = report["detectors"]["fake"]["per_model"]["sdxl"]["ci95"]
    assert lo <= -20.0 <= hi
    assert report["detectors"]["fake"]["per_model"]["sd3"]["model_bias_score_ci95"] is not None
    # Undefined on the data (human score 0), so no interval either.
    assert report["detectors"]["fake"]["per_model"]["sd3"]["ci95"] is None


def test_bias_report_is_deterministic_for_a_seed_and_changes_with_it(report_study):
    one = bias_report(report_study.study, bootstrap=100, seed=5)
    assert one == bias_report(report_study.study, bootstrap=100, seed=5)
    other = bias_report(report_study.study, bootstrap=100, seed=6)
    intervals = [(one["human"][m]["ci95"], other["human"][m]["ci95"]) for m in ("sdxl", "sd3")] + [
        (
            one["detectors"]["fake"]["per_model"]["sdxl"]["ci95"],
            other["detectors"]["fake"]["per_model"]["sdxl"]["ci95"],
        )
    ]
    assert any(a != b for a, b in intervals)
    # Only the intervals move with the seed.
    assert one["human"]["sdxl"]["model_bias_score"] == other["human"]["sdxl"]["model_bias_score"]


def test_bootstrap_zero_leaves_intervals_null(report_study):
    report = bias_report(report_study.study, bootstrap=0)
    assert report["human"]["sdxl"]["ci95"] is None
    assert report["detectors"]["fake"]["per_model"]["sdxl"]["ci95"] is None


def test_filters_restrict_models_and_detectors(report_study):
    report = bias_report(report_study.study, t2i_model="sd3", detector="fake", bootstrap=0)
    assert list(report["human"]) == ["sd3"]
    assert list(report["detectors"]) == ["fake"]
    assert list(report["detectors"]["fake"]["per_model"]) == ["sd3"]
    assert report["coverage"] == {"images": 5, "final_labels": 4}
    assert report["detectors"]["fake"]["filtering"]["tp"] == 4


def test_an_empty_study_gives_an_empty_report(db):
    study = PromptFactory().study  # a study with one prompt and no items
    assert bias_report(study, bootstrap=10) == {
        "coverage": {"images": 0, "final_labels": 0},
        "agreement": {"cohen_kappa": None, "n_images": 0},
        "human": {},
        "detectors": {},
        "judges": {},
        "judge_versions": {},
    }


def test_the_number_of_queries_does_not_grow_with_items_or_predictions(report_study):
    with CaptureQueriesContext(connection) as before:
        bias_report(report_study.study, bootstrap=0)
    prompt = report_study.items["sdxl_gym"][0].prompt
    for verdict in ("male", "female", "filtered", "male"):
        item = ItemFactory(prompt=prompt, t2i_model="sdxl")
        FinalLabelFactory(item=item, value="male")
        predict(item, "fake", "2", verdict)
        predict(item, "blind", "0", verdict)
    with CaptureQueriesContext(connection) as after:
        report = bias_report(report_study.study, bootstrap=0)
    assert len(after) == len(before)
    assert report["coverage"]["final_labels"] == 18


def test_intervals_do_not_depend_on_how_many_threads_drew_them(report_study, monkeypatch):
    from protocols.gender import report as report_module

    monkeypatch.setattr(report_module, "BOOTSTRAP_THREADS", 1)
    sequential = bias_report(report_study.study, bootstrap=300, seed=3)
    monkeypatch.setattr(report_module, "BOOTSTRAP_THREADS", 8)
    threaded = bias_report(report_study.study, bootstrap=300, seed=3)
    assert threaded == sequential
    assert threaded["human"]["sdxl"]["ci95"] is not None


@pytest.mark.parametrize("t2i_model", [None, "sdxl", "sd3"])
def test_prompt_counts_from_the_report_scan_equal_the_drilldown_counts(report_study, t2i_model):
    study = report_study.study
    result = analysis_for("gender").compute(Scope(study, t2i_model=t2i_model), bootstrap=0)
    counts = dashboard_data.detector_prompt_counts(
        Scope(study, t2i_model=t2i_model), question=gender_question(study)
    )
    assert result.prompt_counts == counts
    assert counts  # the fixture has predictions on labelled items in every model
    assert result.report == bias_report(study, t2i_model=t2i_model, bootstrap=0)
