"""reports.report on the fixture study of conftest.py, with the numbers worked by hand."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from sklearn.metrics import cohen_kappa_score

from reports.report import agreement_report, bias_report
from reports.selectors import latest_detector_versions
from tests.factories import FinalLabelFactory, ImageFactory, LabelFactory, PredictionFactory, PromptFactory

# ------------------------------------------------------------------ agreement


def test_agreement_of_the_fixture_study_is_worked_by_hand(report_study):
    report = agreement_report(study=report_study.study)
    # A: m m f lq, B: m m m lq -> p_o = 3/4, p_e = (2*3 + 1*1) / 16 = 7/16, kappa = 5/9.
    assert report["n_images"] == 4
    assert report["observed_agreement"] == pytest.approx(0.75)
    assert report["cohen_kappa"] == pytest.approx(5 / 9)
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score(["male", "male", "female", "low_quality"], ["male", "male", "male", "low_quality"])
    )
    assert report["labels"] == ["male", "female", "low_quality", "other"]
    assert report["confusion"] == [[2, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    assert report["per_t2i_model"] == {
        "sdxl": {"cohen_kappa": pytest.approx(5 / 9), "observed_agreement": 0.75, "n_images": 4}
    }
    assert list(report["per_category"]) == ["profession"]
    assert report["per_annotator_pair"] == [
        {
            "annotators": ["anna", "ben"],
            "cohen_kappa": pytest.approx(5 / 9),
            "observed_agreement": 0.75,
            "n_images": 4,
        }
    ]
    assert report["max_labels_per_image"] == 2


def test_agreement_filters_by_t2i_model_and_category(report_study):
    assert agreement_report(study=report_study.study, t2i_model="sd3")["n_images"] == 0
    assert agreement_report(study=report_study.study, category="place")["cohen_kappa"] is None
    assert agreement_report(study=report_study.study, category="profession")["n_images"] == 4


def test_agreement_ignores_images_with_a_single_label(study, annotator_a):
    LabelFactory(image=ImageFactory(prompt=PromptFactory(study=study)), annotator=annotator_a)
    report = agreement_report(study=study)
    assert report["n_images"] == 0
    assert report["cohen_kappa"] is None
    assert report["observed_agreement"] is None
    assert report["fleiss_kappa"] is None


def test_with_three_annotators_cohen_uses_the_first_two_by_id_and_fleiss_uses_all(
    study, annotator_a, annotator_b, annotator_c
):
    prompt = PromptFactory(study=study)
    # anna, ben, cleo were created in that order, so their ids rise in that order.
    triples = [("male", "male", "female"), ("female", "female", "female"), ("male", "female", "male")]
    for a, b, c in triples:
        image = ImageFactory(prompt=prompt)
        for annotator, value in ((annotator_c, c), (annotator_a, a), (annotator_b, b)):
            LabelFactory(image=image, annotator=annotator, value=value)
    report = agreement_report(study=study)
    assert report["n_images"] == 3
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score([t[0] for t in triples], [t[1] for t in triples])
    )
    # Fleiss by hand: P_i = 1/3, 1, 1/3 -> P = 5/9; p_male = 4/9, p_female = 5/9 -> P_e = 41/81.
    assert report["fleiss_kappa"] == pytest.approx((5 / 9 - 41 / 81) / (1 - 41 / 81))
    # Krippendorff by hand: D_o = (9 - 5)/2 + 0 + (9 - 5)/2 = 4; n = 9, totals m 4, f 5 ->
    # alpha = 1 - (9 - 1) * 4 / (81 - 16 - 25) = 0.2.
    assert report["krippendorff_alpha"] == pytest.approx(0.2)
    assert report["max_labels_per_image"] == 3
    assert [p["annotators"] for p in report["per_annotator_pair"]] == [
        ["anna", "ben"],
        ["anna", "cleo"],
        ["ben", "cleo"],
    ]
    assert all(p["n_images"] == 3 for p in report["per_annotator_pair"])


# ------------------------------------------------------------------ bias report: human side


@pytest.fixture
def report(report_study):
    return bias_report(study=report_study.study, bootstrap=200, seed=1)


def test_coverage_counts_images_and_final_labels(report):
    assert report["coverage"] == {"images": 15, "final_labels": 14}
    assert report["agreement"]["n_images"] == 4
    assert report["agreement"]["cohen_kappa"] == pytest.approx(5 / 9)


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


# ------------------------------------------------------------------ bias report: detectors


def test_detector_uses_the_version_run_last(report):
    assert report["detectors"]["fake"]["version"] == "2"


def test_the_version_written_last_wins_even_when_it_is_named_lower(report_study):
    image = report_study.images["sdxl_gym"][0]
    PredictionFactory(image=image, detector="fake", version="0-rerun", verdict="male")
    assert latest_detector_versions(study=report_study.study) == {"blind": "0", "fake": "0-rerun"}
    report = bias_report(study=report_study.study, bootstrap=0)
    assert report["detectors"]["fake"]["version"] == "0-rerun"
    assert report["detectors"]["fake"]["filtering"]["fp"] == 1  # only the re-run image counts
    assert report["detectors"]["fake"]["filtering"]["tp"] == 0


def test_detector_filtering_and_accuracy_are_worked_by_hand(report):
    fake = report["detectors"]["fake"]
    # Clear & kept: 4 (sdxl doctor) + 1 (nurse) + 4 (sd3) = 9; clear & filtered: 1 (nurse);
    # not clear & kept: the low-quality doctor image; not clear & filtered: other + 2 gym.
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
    assert sd3["n_images"] == 4  # the image without a final label is left out


def test_failed_predictions_do_not_count(report):
    blind = report["detectors"]["blind"]
    assert blind["filtering"]["tp"] + blind["filtering"]["fp"] + blind["filtering"]["tn"] == 0
    assert blind["filtering"]["fn"] == 1
    assert blind["filtering"]["precision"] is None
    assert blind["filtering"]["filter_rate"] is None
    assert blind["accuracy"]["overall"] is None
    assert blind["per_model"]["sdxl"]["model_bias_score"] is None


def test_detector_interval_is_of_the_percentage_difference(report):
    lo, hi = report["detectors"]["fake"]["per_model"]["sdxl"]["ci95"]
    assert lo <= -20.0 <= hi
    assert report["detectors"]["fake"]["per_model"]["sd3"]["model_bias_score_ci95"] is not None
    # Undefined on the data (human score 0), so no interval either.
    assert report["detectors"]["fake"]["per_model"]["sd3"]["ci95"] is None


def test_bias_report_is_deterministic_for_a_seed_and_changes_with_it(report_study):
    one = bias_report(study=report_study.study, bootstrap=100, seed=5)
    assert one == bias_report(study=report_study.study, bootstrap=100, seed=5)
    other = bias_report(study=report_study.study, bootstrap=100, seed=6)
    intervals = [(one["human"][m]["ci95"], other["human"][m]["ci95"]) for m in ("sdxl", "sd3")] + [
        (one["detectors"]["fake"]["per_model"][m]["ci95"], other["detectors"]["fake"]["per_model"][m]["ci95"])
        for m in ("sdxl",)
    ]
    assert any(a != b for a, b in intervals)
    # Only the intervals move with the seed.
    assert one["human"]["sdxl"]["model_bias_score"] == other["human"]["sdxl"]["model_bias_score"]


def test_bootstrap_zero_leaves_intervals_null(report_study):
    report = bias_report(study=report_study.study, bootstrap=0)
    assert report["human"]["sdxl"]["ci95"] is None
    assert report["detectors"]["fake"]["per_model"]["sdxl"]["ci95"] is None


def test_filters_restrict_models_and_detectors(report_study):
    report = bias_report(study=report_study.study, t2i_model="sd3", detector="fake", bootstrap=0)
    assert list(report["human"]) == ["sd3"]
    assert list(report["detectors"]) == ["fake"]
    assert list(report["detectors"]["fake"]["per_model"]) == ["sd3"]
    assert report["coverage"] == {"images": 5, "final_labels": 4}
    assert report["detectors"]["fake"]["filtering"]["tp"] == 4


def test_an_empty_study_gives_an_empty_report(db):
    study = PromptFactory().study  # a study with one prompt and no images
    report = bias_report(study=study, bootstrap=10)
    assert report == {
        "coverage": {"images": 0, "final_labels": 0},
        "agreement": {"cohen_kappa": None, "n_images": 0},
        "human": {},
        "detectors": {},
    }


def test_the_number_of_queries_does_not_grow_with_images_or_predictions(report_study):
    with CaptureQueriesContext(connection) as before:
        bias_report(study=report_study.study, bootstrap=0)
    prompt = report_study.images["sdxl_gym"][0].prompt
    for verdict in ("male", "female", "filtered", "male"):
        image = ImageFactory(study=report_study.study, prompt=prompt, t2i_model="sdxl")
        FinalLabelFactory(image=image, value="male")
        PredictionFactory(image=image, detector="fake", version="2", verdict=verdict)
        PredictionFactory(image=image, detector="blind", version="0", verdict=verdict)
    with CaptureQueriesContext(connection) as after:
        report = bias_report(study=report_study.study, bootstrap=0)
    assert len(after) == len(before)
    assert report["coverage"]["final_labels"] == 18


def test_intervals_do_not_depend_on_how_many_threads_drew_them(report_study, monkeypatch):
    from reports import report as report_module

    monkeypatch.setattr(report_module, "BOOTSTRAP_THREADS", 1)
    sequential = bias_report(study=report_study.study, bootstrap=300, seed=3)
    monkeypatch.setattr(report_module, "BOOTSTRAP_THREADS", 8)
    threaded = bias_report(study=report_study.study, bootstrap=300, seed=3)
    assert threaded == sequential
    assert threaded["human"]["sdxl"]["ci95"] is not None


@pytest.mark.parametrize("t2i_model", [None, "sdxl", "sd3"])
def test_prompt_counts_from_the_report_scan_equal_the_drilldown_counts(report_study, t2i_model):
    from reports.drilldown import detector_prompt_counts
    from reports.report import bias_report_with_prompt_counts

    report, counts = bias_report_with_prompt_counts(
        study=report_study.study, t2i_model=t2i_model, bootstrap=0
    )
    assert counts == detector_prompt_counts(study=report_study.study, t2i_model=t2i_model)
    assert counts  # the fixture has predictions on labelled images in every model
    assert report == bias_report(study=report_study.study, t2i_model=t2i_model, bootstrap=0)
