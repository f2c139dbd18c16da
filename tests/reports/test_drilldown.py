"""Reads behind the gender drill-downs, on the hand-counted fixture study of ``dashboard_data``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from protocols.gender import drilldown
from protocols.gender.analysis import gender_question
from reports.analyses import analysis_for
from reports.selectors import Scope, filter_options
from studies.models import Item
from tests.reports import dashboard_data
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db

LABELS = (("male", "Male"), ("female", "Female"), ("low_quality", "Low quality"), ("other", "Other"))
CLEAR = ("male", "female")


def confusion(fx, detector="fake", **scope):
    return drilldown.detector_confusion(
        Scope(fx.study, **scope),
        detector=detector,
        question=gender_question(fx.study),
        labels=LABELS,
        clear=CLEAR,
    )


def test_confusion_counts_only_labelled_items_of_the_latest_version(fx):
    result = confusion(fx)
    assert result.version == "2"
    assert result.total == 10
    assert result.counts[("female", "male")] == 2
    assert ("female", "female") in result.counts


def test_confusion_derives_the_filtering_table(fx):
    assert confusion(fx).filtering == {"tp": 6, "fn": 1, "fp": 1, "tn": 2}


def test_confusion_derives_the_gender_table_on_clear_kept_items(fx):
    result = confusion(fx)
    assert result.gender == {"male_male": 2, "male_female": 0, "female_male": 2, "female_female": 2}
    assert result.gender_matrix == [
        ("male", [("male", 2), ("female", 0)]),
        ("female", [("male", 2), ("female", 2)]),
    ]


def test_confusion_filters_by_model_and_category(fx):
    assert confusion(fx, t2i_model="sd3").total == 4
    assert confusion(fx, category="place").total == 4


def test_confusion_counts_failed_predictions_apart(fx):
    result = confusion(fx, detector="facey")
    assert result.total == 4
    assert result.n_failed == 1


def gallery(fx, kind="all", **scope):
    return drilldown.detector_disagreements(
        Scope(fx.study, **scope), detector="fake", question=gender_question(fx.study), clear=CLEAR, kind=kind
    )


def test_disagreement_counts_per_kind(fx):
    counts = drilldown.disagreement_counts(
        Scope(fx.study), detector="fake", question=gender_question(fx.study), clear=CLEAR
    )
    assert counts == {"all": 4, "false_keep": 1, "false_filter": 1, "wrong_gender": 2}


def test_disagreement_gallery_lists_the_items_in_order(fx):
    wrong = list(gallery(fx, "wrong_gender"))
    assert [p.item_id for p in wrong] == [fx.items[2].pk, fx.items[9].pk]
    assert [(p.human, p.output_label) for p in wrong] == [("female", "male"), ("female", "male")]
    false_filter = gallery(fx, "false_filter").get()
    assert false_filter.filter_reason == "no_face"
    assert drilldown.reason_name(false_filter) == "No face"
    assert false_filter.word == "lawyer"


def test_unknown_gallery_kind_is_refused_by_name(fx):
    with pytest.raises(drilldown.UnknownDisagreement, match="'odd'"):
        gallery(fx, "odd")


def test_disagreement_follows_the_questions_clear_values():
    assert drilldown.disagrees("male", "female", clear=CLEAR)
    assert drilldown.disagrees("male", "filtered", clear=CLEAR)
    assert drilldown.disagrees("low_quality", "male", clear=CLEAR)
    assert not drilldown.disagrees("low_quality", "filtered", clear=CLEAR)
    assert not drilldown.disagrees("female", "female", clear=CLEAR)
    assert not drilldown.disagrees(None, "male", clear=CLEAR)
    # Another study's words: the first clear answer is compared with "male".
    assert not drilldown.disagrees("man", "male", clear=("man", "woman"))
    assert drilldown.disagrees("woman", "male", clear=("man", "woman"))


def items(fx, prompt, **kwargs):
    return drilldown.prompt_items(prompt=prompt, question=gender_question(fx.study), clear=CLEAR, **kwargs)


def test_prompt_items_show_labels_final_label_and_every_detector(fx):
    rows, detectors = items(fx, fx.lawyer)
    assert detectors == ["facey", "fake"]
    assert len(rows) == 7
    third = next(r for r in rows if r.item.pk == fx.items[2].pk)
    assert [(label.annotator.username, label.value) for label in third.labels] == [
        ("anna", "female"),
        ("ben", "female"),
    ]
    assert third.final.value == "female"
    assert third.image.role == "image"  # the item's main image
    assert third.verdicts["fake"].verdict == "male"
    assert third.verdict_cells[1] == ("fake", third.verdicts["fake"], True, "")


def test_prompt_items_mark_a_missing_prediction_as_none(fx):
    rows, _ = items(fx, fx.lawyer, t2i_model="sd3")
    assert [r.verdicts["facey"] is None for r in rows] == [False, True]
    assert rows[0].verdicts["facey"].status == "failed"


def test_prompt_items_cost_a_fixed_number_of_queries(fx):
    with CaptureQueriesContext(connection) as few:
        items(fx, fx.rnd)
    with CaptureQueriesContext(connection) as many:
        items(fx, fx.lawyer)
    assert len(many) == len(few)


def test_a_prompt_of_more_items_than_a_statement_may_name_is_read_a_chunk_at_a_time(fx, settings):
    """150 more items of the lawyer prompt, SQLite's limit at 120 values, the chunks cut at 50:
    every item is listed, the fixture's first with its labels as before."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    first, _ = items(fx, fx.lawyer)
    Item.objects.bulk_create(
        [
            Item(study=fx.study, prompt=fx.lawyer, t2i_model="sdxl", key=f"more/{n}.png", index=100 + n)
            for n in range(150)
        ]
    )
    with sqlite_variable_limit(120):
        rows, _ = items(fx, fx.lawyer)
    assert len(rows) == len(first) + 150
    assert [r.labels for r in rows if r.item.pk == first[0].item.pk] == [first[0].labels]


def test_detector_prompt_counts_use_labelled_items_only(fx):
    # The report's counts, against the hand-worked figures (the SQL reference is dashboard_data's).
    counts = analysis_for("gender").compute(Scope(fx.study), bootstrap=0).prompt_counts
    lawyer = ("profession", "lawyer", fx.lawyer.text)
    assert counts[(*lawyer, "sdxl", "fake")] == (3, 0, 4)
    assert counts[(*lawyer, "sd3", "fake")] == (0, 2, 2)
    rnd = ("place", dashboard_data.RND_WORD, fx.rnd.text)
    assert counts[(*rnd, "sdxl", "fake")] == (0, 0, 2)


def test_filter_options_come_from_the_data(fx):
    options = filter_options(study=fx.study)
    assert options.t2i_models == ["sd3", "sdxl"]
    assert options.categories == ["place", "profession"]
    assert options.detectors == ["facey", "fake"]
