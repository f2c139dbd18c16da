"""Selector tests: image states, dispute queue, progress, details, stats, agreement rows."""

from __future__ import annotations

import pytest

from annotate import selectors, services
from annotate.models import ItemState
from tests.annotate.gender import (
    final_set,
    label_import,
    resolve,
    submit,
)
from tests.factories import ItemFactory, PromptFactory, StudyFactory, UserFactory


def _label(study, image, annotator, value):
    """An imported label: a completed seat plus the label, through the service."""
    return label_import(item=image, annotator=annotator, value=value)


def _label_next(study, annotator, value, duration_ms=None):
    """Label the image the queue shows the annotator, as the labelling screen does."""
    seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
    submit(item=seat.item, annotator=annotator, value=value, duration_ms=duration_ms)
    return seat.item


@pytest.fixture
def five_states(study, annotator_a, annotator_b, researcher, make_items):
    """Five images, one in each state: unlabelled, in progress, agreed, disputed, resolved."""
    unlabelled, in_progress, agreed, disputed, resolved = make_items(5)
    _label(study, in_progress, annotator_a, "male")
    for annotator in (annotator_a, annotator_b):
        _label(study, agreed, annotator, "female")
    _label(study, disputed, annotator_a, "male")
    _label(study, disputed, annotator_b, "female")
    _label(study, resolved, annotator_a, "male")
    _label(study, resolved, annotator_b, "low_quality")
    resolve(item=resolved, researcher=researcher, value="male")
    return {
        ItemState.UNLABELLED: unlabelled,
        ItemState.IN_PROGRESS: in_progress,
        ItemState.AGREED: agreed,
        ItemState.DISPUTED: disputed,
        ItemState.RESOLVED: resolved,
    }


def test_items_with_state_computes_every_state(study, five_states):
    rows = {image.pk: (image.state, image.n_labels) for image in selectors.items_with_state(study=study)}
    assert rows == {
        five_states[ItemState.UNLABELLED].pk: (ItemState.UNLABELLED, 0),
        five_states[ItemState.IN_PROGRESS].pk: (ItemState.IN_PROGRESS, 1),
        five_states[ItemState.AGREED].pk: (ItemState.AGREED, 2),
        five_states[ItemState.DISPUTED].pk: (ItemState.DISPUTED, 2),
        five_states[ItemState.RESOLVED].pk: (ItemState.RESOLVED, 2),
    }


def test_items_with_state_can_be_filtered_by_state_in_sql(study, five_states):
    agreed = selectors.items_with_state(study=study).filter(state=ItemState.AGREED)
    assert list(agreed) == [five_states[ItemState.AGREED]]
    assert agreed[0].n_unsettled == 0


def test_image_state_of_one_image(five_states):
    for state, image in five_states.items():
        assert selectors.item_state(image) == state


def test_imported_final_label_counts_as_resolved(study, researcher, make_items):
    image = make_items(1)[0]
    final_set(item=image, value="female", decided_by=researcher)
    assert selectors.item_state(image) == ItemState.RESOLVED


def test_dispute_queue_holds_only_disputed_images_with_their_labels(study, five_states):
    [row] = selectors.dispute_queue(study=study)
    assert row.item == five_states[ItemState.DISPUTED]
    assert row.question.key == "gender"
    assert [(name, value) for name, value, _ in row.labels] == [("anna", "male"), ("ben", "female")]
    assert (row.n_labels, row.n_needed) == (2, 2)


def test_majority_study_settles_two_one_and_disputes_a_three_way_split(db, annotator_a, annotator_b):
    from annotate.models import FinalLabel
    from tests.factories import PairItemFactory, StudyFactory

    third = UserFactory(username="tom")
    pairs = StudyFactory(protocol="pair_change", labels_per_item=3, agreement="majority")
    pairs.annotators.add(annotator_a, annotator_b, third)
    prompt = PromptFactory(study=pairs)
    settled, split = (PairItemFactory(prompt=prompt, question_keys=["age"]) for _ in range(2))
    answers = {annotator_a: ("older", "older"), annotator_b: ("older", "younger"), third: ("same", "same")}
    for annotator, (first, second) in answers.items():
        services.assignment_queue(study=pairs, annotator=annotator, size=2)
        services.annotation_submit(item=settled, annotator=annotator, answers={"age": first})
        services.annotation_submit(item=split, annotator=annotator, answers={"age": second})
    assert FinalLabel.objects.get(item=settled).value == "older"
    assert selectors.item_state(settled) == ItemState.AGREED
    assert not FinalLabel.objects.filter(item=split).exists()
    assert selectors.item_state(split) == ItemState.DISPUTED
    [row] = selectors.dispute_queue(study=pairs)
    assert (row.item, row.question.key, row.n_labels) == (split, "age", 3)


def test_images_of_other_studies_are_not_listed(study, five_states):
    other = PromptFactory()
    ItemFactory(prompt=other)
    assert selectors.items_with_state(study=study).count() == 5


def test_annotator_progress_counts_done_and_remaining(study, annotator_a, annotator_b, make_items):
    images = make_items(4)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(0, 4)
    _label_next(study, annotator_a, "male")
    services.assignment_queue(study=study, annotator=annotator_a, size=1)  # image 1 shown, still to do
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(1, 3)
    # Ben and a third annotator fill images 2 and 3: Anna can no longer take them.
    third = UserFactory(username="tom")
    for image in images[2:]:
        _label(study, image, annotator_b, "male")
        _label(study, image, third, "male")
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(1, 1)


def test_image_detail_lists_labels_final_label_and_history(five_states, annotator_b, researcher):
    image = five_states[ItemState.RESOLVED]
    resolve(item=image, researcher=researcher, value="low_quality", note="blurred face")
    detail = selectors.item_detail(item=image)
    assert detail["state"] == ItemState.RESOLVED
    [question] = detail["questions"]
    assert [(row["annotator"], row["value"], row["display"]) for row in question["labels"]] == [
        ("anna", "male", "Male"),
        ("ben", "low_quality", "Low quality"),
    ]
    assert question["final_label"]["value"] == "low_quality"
    assert question["final_label"]["decided_by"] == "rita"
    assert question["final_label"]["note"] == "blurred face"
    assert [rev["value"] for rev in detail["final_label_history"]] == ["male", "low_quality"]
    assert [(rev["annotator"], rev["changed_by"]) for rev in detail["label_history"]] == [
        ("anna", "anna"),
        ("ben", "ben"),
    ]


def test_annotator_stats_reports_labels_median_time_and_agreement(
    study, annotator_a, annotator_b, researcher, make_items
):
    images = make_items(3)
    _label_next(study, annotator_a, "male", duration_ms=1000)
    _label_next(study, annotator_b, "male", duration_ms=4000)
    _label_next(study, annotator_a, "male", duration_ms=3000)
    _label_next(study, annotator_b, "female", duration_ms=2000)
    resolve(item=images[1], researcher=researcher, value="female")
    _label_next(study, annotator_a, "low_quality", duration_ms=8000)  # no final label yet
    stats = {row.username: row for row in selectors.annotator_stats(study=study)}
    # Agreement with the final answer counts every answer with a final label (it
    # counted resolved disputes only): image 0 agreed "male" with both; image 1 was resolved
    # "female", against Anna's "male" and with Ben's "female"; image 2 has no final label yet.
    assert stats["anna"] == selectors.AnnotatorStats("anna", 3, 3.0, 0.5, 2)
    assert stats["ben"] == selectors.AnnotatorStats("ben", 2, 3.0, 1.0, 2)


def test_annotator_stats_agreement_counts_agreed_resolved_and_imported_final_labels(
    annotator_a, annotator_b, annotator_c, researcher
):
    """Regression: a majority rule (2 of 3) settles items where one annotator was outvoted; the
    agreement must count them, not only the disputed-then-resolved items."""
    study = StudyFactory(labels_per_item=3, agreement="majority")
    study.annotators.add(annotator_a, annotator_b, annotator_c)
    items = [ItemFactory(prompt=PromptFactory(study=study)) for _ in range(5)]
    plan = {  # item: (anna, ben, cleo)
        0: ("male", "male", "male"),  # agreed male
        1: ("male", "male", "female"),  # majority male: Cleo outvoted
        2: ("female", "female", "male"),  # majority female: Cleo outvoted
        3: ("male", "female", "low_quality"),  # disputed, resolved female
        4: ("male", "female", "low_quality"),  # disputed, final imported: low quality
    }
    for annotator_index, annotator in enumerate((annotator_a, annotator_b, annotator_c)):
        for item_index in plan:
            _label_next(study, annotator, plan[item_index][annotator_index])
    resolve(item=items[3], researcher=researcher, value="female")
    final_set(item=items[4], value="low_quality", decided_by=researcher)
    stats = {row.username: row for row in selectors.annotator_stats(study=study)}
    assert (stats["anna"].agreement_with_final, stats["anna"].answers_with_final) == (3 / 5, 5)
    assert (stats["ben"].agreement_with_final, stats["ben"].answers_with_final) == (4 / 5, 5)
    assert (stats["cleo"].agreement_with_final, stats["cleo"].answers_with_final) == (2 / 5, 5)


def test_annotator_stats_lists_members_without_labels(study):
    assert selectors.annotator_stats(study=study) == [
        selectors.AnnotatorStats("anna", 0, None, None),
        selectors.AnnotatorStats("ben", 0, None, None),
    ]


def test_studies_for_annotator_lists_only_their_studies(study, annotator_a, outsider):
    assert list(selectors.studies_for_annotator(user=annotator_a)) == [study]
    assert list(selectors.studies_for_annotator(user=outsider)) == []


def test_label_rows_for_agreement_are_ordered_and_filterable(study, annotator_a, annotator_b):
    portrait = PromptFactory(study=study, category="trait")
    job = PromptFactory(study=study, category="profession")
    first = ItemFactory(prompt=job, t2i_model="sdxl")
    second = ItemFactory(prompt=portrait, t2i_model="dalle3")
    for image in (first, second):
        _label(study, image, annotator_b, "female")
        _label(study, image, annotator_a, "male")
    rows = selectors.label_rows_for_agreement(study=study)
    assert rows == [
        (first.pk, "sdxl", "profession", "anna", "male"),
        (first.pk, "sdxl", "profession", "ben", "female"),
        (second.pk, "dalle3", "trait", "anna", "male"),
        (second.pk, "dalle3", "trait", "ben", "female"),
    ]
    assert [row[0] for row in selectors.label_rows_for_agreement(study=study, t2i_model="dalle3")] == [
        second.pk
    ] * 2
    assert [row[0] for row in selectors.label_rows_for_agreement(study=study, category="profession")] == [
        first.pk
    ] * 2


def test_items_with_state_works_with_joins_subqueries_and_paging(study, five_states):
    """The ways views, API and admin use it: select_related, a pk__in subquery, a page count."""
    from django.core.paginator import Paginator

    from studies.models import Item

    joined = selectors.items_with_state(study=study).select_related("prompt", "study")
    assert {image.pk: image.state for image in joined} == {
        image.pk: state for state, image in five_states.items()
    }
    disputed_pks = selectors.items_with_state(study=study).filter(state=ItemState.DISPUTED).values("pk")
    assert list(Item.objects.filter(pk__in=disputed_pks)) == [five_states[ItemState.DISPUTED]]
    assert Paginator(selectors.items_with_state(study=study), 2).num_pages == 3


def test_state_follows_label_changes(study, annotator_a, annotator_b, make_items):
    image = make_items(1)[0]
    _label(study, image, annotator_a, "male")
    _label(study, image, annotator_b, "male")
    assert selectors.item_state(image) == ItemState.AGREED
    _label(study, image, annotator_b, "female")
    assert selectors.item_state(image) == ItemState.DISPUTED


def test_progress_leaves_out_images_others_hold_until_their_seats_expire(
    study, annotator_a, annotator_b, make_items
):
    from datetime import timedelta

    from django.utils import timezone

    make_items(1)
    third = UserFactory(username="tom")
    study.annotators.add(third)
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    services.assignment_queue(study=study, annotator=third, size=1)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(0, 0)
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 1)
    assert selectors.annotator_progress(study=study, annotator=annotator_a, now=later) == selectors.Progress(
        0, 1
    )
