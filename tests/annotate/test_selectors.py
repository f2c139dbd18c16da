"""Selector tests: image states, dispute queue, progress, details, stats, agreement rows."""

from __future__ import annotations

import pytest

from annotate import selectors, services
from annotate.models import ImageState
from tests.factories import ImageFactory, PromptFactory, UserFactory


def _label(study, image, annotator, value):
    """An imported label: a completed seat plus the label, through the service."""
    return services.label_import(image=image, annotator=annotator, value=value)


def _label_next(study, annotator, value, duration_ms=None):
    """Label the image the queue shows the annotator, as the labelling screen does."""
    seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
    services.annotation_submit(image=seat.image, annotator=annotator, value=value, duration_ms=duration_ms)
    return seat.image


@pytest.fixture
def five_states(study, annotator_a, annotator_b, researcher, make_images):
    """Five images, one in each state: unlabelled, in progress, agreed, disputed, resolved."""
    unlabelled, in_progress, agreed, disputed, resolved = make_images(5)
    _label(study, in_progress, annotator_a, "male")
    for annotator in (annotator_a, annotator_b):
        _label(study, agreed, annotator, "female")
    _label(study, disputed, annotator_a, "male")
    _label(study, disputed, annotator_b, "female")
    _label(study, resolved, annotator_a, "male")
    _label(study, resolved, annotator_b, "low_quality")
    services.dispute_resolve(image=resolved, researcher=researcher, value="male")
    return {
        ImageState.UNLABELLED: unlabelled,
        ImageState.IN_PROGRESS: in_progress,
        ImageState.AGREED: agreed,
        ImageState.DISPUTED: disputed,
        ImageState.RESOLVED: resolved,
    }


def test_images_with_state_computes_every_state(study, five_states):
    rows = {image.pk: (image.state, image.n_labels) for image in selectors.images_with_state(study=study)}
    assert rows == {
        five_states[ImageState.UNLABELLED].pk: (ImageState.UNLABELLED, 0),
        five_states[ImageState.IN_PROGRESS].pk: (ImageState.IN_PROGRESS, 1),
        five_states[ImageState.AGREED].pk: (ImageState.AGREED, 2),
        five_states[ImageState.DISPUTED].pk: (ImageState.DISPUTED, 2),
        five_states[ImageState.RESOLVED].pk: (ImageState.RESOLVED, 2),
    }


def test_images_with_state_can_be_filtered_by_state_in_sql(study, five_states):
    agreed = selectors.images_with_state(study=study).filter(state=ImageState.AGREED)
    assert list(agreed) == [five_states[ImageState.AGREED]]
    assert agreed[0].final_value == "female"
    assert agreed[0].final_source == "agreed"


def test_image_state_of_one_image(five_states):
    for state, image in five_states.items():
        assert selectors.image_state(image) == state


def test_imported_final_label_counts_as_resolved(study, researcher, make_images):
    image = make_images(1)[0]
    services.final_label_set(image=image, value="female", decided_by=researcher)
    assert selectors.image_state(image) == ImageState.RESOLVED


def test_dispute_queue_holds_only_disputed_images(study, five_states):
    assert list(selectors.dispute_queue(study=study)) == [five_states[ImageState.DISPUTED]]


def test_images_of_other_studies_are_not_listed(study, five_states):
    other = PromptFactory()
    ImageFactory(prompt=other)
    assert selectors.images_with_state(study=study).count() == 5


def test_annotator_progress_counts_done_and_remaining(study, annotator_a, annotator_b, make_images):
    images = make_images(4)
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
    image = five_states[ImageState.RESOLVED]
    services.dispute_resolve(image=image, researcher=researcher, value="low_quality", note="blurred face")
    detail = selectors.image_detail(image=image)
    assert detail["state"] == ImageState.RESOLVED
    assert [(row["annotator"], row["value"]) for row in detail["labels"]] == [
        ("anna", "male"),
        ("ben", "low_quality"),
    ]
    assert detail["final_label"]["value"] == "low_quality"
    assert detail["final_label"]["decided_by"] == "rita"
    assert detail["final_label"]["note"] == "blurred face"
    assert [rev["value"] for rev in detail["final_label_history"]] == ["male", "low_quality"]
    assert [(rev["annotator"], rev["changed_by"]) for rev in detail["label_history"]] == [
        ("anna", "anna"),
        ("ben", "ben"),
    ]


def test_annotator_stats_reports_labels_median_time_and_agreement(
    study, annotator_a, annotator_b, researcher, make_images
):
    images = make_images(3)
    _label_next(study, annotator_a, "male", duration_ms=1000)
    _label_next(study, annotator_b, "male", duration_ms=4000)
    _label_next(study, annotator_a, "male", duration_ms=3000)
    _label_next(study, annotator_b, "female", duration_ms=2000)
    services.dispute_resolve(image=images[1], researcher=researcher, value="female")
    _label_next(study, annotator_a, "low_quality", duration_ms=8000)  # no final label yet
    stats = {row.username: row for row in selectors.annotator_stats(study=study)}
    assert stats["anna"] == selectors.AnnotatorStats("anna", 3, 3.0, 0.5)
    assert stats["ben"] == selectors.AnnotatorStats("ben", 2, 3.0, 1.0)


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
    first = ImageFactory(prompt=job, t2i_model="sdxl")
    second = ImageFactory(prompt=portrait, t2i_model="dalle3")
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


def test_images_with_state_works_with_joins_subqueries_and_paging(study, five_states):
    """The ways views, API and admin use it: select_related, a pk__in subquery, a page count."""
    from django.core.paginator import Paginator

    from annotate.models import Image

    joined = selectors.images_with_state(study=study).select_related("prompt", "study", "final_label")
    assert {image.pk: image.state for image in joined} == {
        image.pk: state for state, image in five_states.items()
    }
    disputed_pks = selectors.images_with_state(study=study).filter(state=ImageState.DISPUTED).values("pk")
    assert list(Image.objects.filter(pk__in=disputed_pks)) == [five_states[ImageState.DISPUTED]]
    assert Paginator(selectors.images_with_state(study=study), 2).num_pages == 3
    assert selectors.dispute_queue(study=study).first() == five_states[ImageState.DISPUTED]


def test_state_follows_label_changes(study, annotator_a, annotator_b, make_images):
    image = make_images(1)[0]
    _label(study, image, annotator_a, "male")
    _label(study, image, annotator_b, "male")
    assert selectors.image_state(image) == ImageState.AGREED
    _label(study, image, annotator_b, "female")
    assert selectors.image_state(image) == ImageState.DISPUTED


def test_progress_leaves_out_images_others_hold_until_their_seats_expire(
    study, annotator_a, annotator_b, make_images
):
    from datetime import timedelta

    from django.utils import timezone

    make_images(1)
    third = UserFactory(username="tom")
    study.annotators.add(third)
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    services.assignment_queue(study=study, annotator=third, size=1)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(0, 0)
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 1)
    assert selectors.annotator_progress(study=study, annotator=annotator_a, now=later) == selectors.Progress(
        0, 1
    )
