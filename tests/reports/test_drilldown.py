"""Reads behind the drill-downs, on the hand-counted fixture study of ``dashboard_data``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reports import drilldown
from tests.reports import dashboard_data

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """PBKDF2 costs ~0.6 s per persona on this machine; these tests are not about passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fx(study, annotator_a, annotator_b):
    return dashboard_data.build(study, annotator_a, annotator_b)


def test_confusion_counts_only_labelled_images_of_the_latest_version(fx):
    confusion = drilldown.detector_confusion(detector="fake", study=fx.study)
    assert confusion.version == "2"
    assert confusion.total == 10
    assert confusion.counts[("female", "male")] == 2
    assert ("female", "female") in confusion.counts


def test_confusion_derives_the_filtering_table(fx):
    confusion = drilldown.detector_confusion(detector="fake", study=fx.study)
    assert confusion.filtering == {"tp": 6, "fn": 1, "fp": 1, "tn": 2}


def test_confusion_derives_the_gender_table_on_clear_kept_images(fx):
    confusion = drilldown.detector_confusion(detector="fake", study=fx.study)
    assert confusion.gender == {"male_male": 2, "male_female": 0, "female_male": 2, "female_female": 2}


def test_confusion_filters_by_model_and_category(fx):
    assert drilldown.detector_confusion(detector="fake", study=fx.study, t2i_model="sd3").total == 4
    assert drilldown.detector_confusion(detector="fake", study=fx.study, category="place").total == 4


def test_confusion_counts_failed_predictions_apart(fx):
    confusion = drilldown.detector_confusion(detector="facey", study=fx.study)
    assert confusion.total == 4
    assert confusion.n_failed == 1


def test_disagreement_counts_per_kind(fx):
    counts = drilldown.disagreement_counts(detector="fake", study=fx.study)
    assert counts == {"all": 4, "false_keep": 1, "false_filter": 1, "wrong_gender": 2}


def test_disagreement_gallery_lists_the_images_in_order(fx):
    wrong = list(drilldown.detector_disagreements(detector="fake", kind="wrong_gender", study=fx.study))
    assert [p.image_id for p in wrong] == [fx.images[2].pk, fx.images[9].pk]
    false_filter = drilldown.detector_disagreements(
        detector="fake", kind="false_filter", study=fx.study
    ).get()
    assert false_filter.filter_reason == "no_face"


def test_unknown_gallery_kind_is_refused_by_name(fx):
    with pytest.raises(drilldown.UnknownDisagreement, match="'odd'"):
        drilldown.detector_disagreements(detector="fake", kind="odd", study=fx.study)


def test_prompt_images_show_labels_final_label_and_every_detector(fx):
    rows, detectors = drilldown.prompt_images(prompt=fx.lawyer)
    assert detectors == ["facey", "fake"]
    assert len(rows) == 7
    third = next(r for r in rows if r.image.pk == fx.images[2].pk)
    assert [(label.annotator.username, label.value) for label in third.labels] == [
        ("anna", "female"),
        ("ben", "female"),
    ]
    assert third.final.value == "female"
    assert third.verdicts["fake"].verdict == "male"
    assert third.verdict_cells[1] == ("fake", third.verdicts["fake"], True)


def test_prompt_images_mark_a_missing_prediction_as_none(fx):
    rows, _ = drilldown.prompt_images(prompt=fx.lawyer, t2i_model="sd3")
    assert [r.verdicts["facey"] is None for r in rows] == [False, True]
    assert rows[0].verdicts["facey"].status == "failed"


def test_prompt_images_cost_a_fixed_number_of_queries(fx):
    with CaptureQueriesContext(connection) as few:
        drilldown.prompt_images(prompt=fx.rnd)
    with CaptureQueriesContext(connection) as many:
        drilldown.prompt_images(prompt=fx.lawyer)
    assert len(many) == len(few)


def test_detector_prompt_counts_use_labelled_images_only(fx):
    counts = drilldown.detector_prompt_counts(study=fx.study, detectors=["fake"])
    lawyer = ("profession", "lawyer", fx.lawyer.text)
    assert counts[(*lawyer, "sdxl", "fake")] == (3, 0, 4)
    assert counts[(*lawyer, "sd3", "fake")] == (0, 2, 2)
    rnd = ("place", dashboard_data.RND_WORD, fx.rnd.text)
    assert counts[(*rnd, "sdxl", "fake")] == (0, 0, 2)


def test_filter_options_come_from_the_data(fx):
    options = drilldown.filter_options(study=fx.study)
    assert options.t2i_models == ["sd3", "sdxl"]
    assert options.categories == ["place", "profession"]
    assert options.detectors == ["facey", "fake"]


def test_prompt_ids_map_report_rows_to_prompts(fx):
    ids = drilldown.prompt_ids(study=fx.study)
    assert ids[("place", dashboard_data.RND_WORD, fx.rnd.text)] == fx.rnd.pk
