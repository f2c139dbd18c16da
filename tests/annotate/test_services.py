"""Service tests: handing out images, submitting labels, undo, final labels and disputes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from annotate import services
from annotate.errors import (
    AlreadyResolved,
    InvalidLabel,
    ItemFull,
    NotAssigned,
    NotDisputed,
    NothingToUndo,
    StaleSubmit,
)
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    Label,
    LabelRevision,
)
from annotate.services import claims, locks
from tests.annotate.gender import (
    final_set,
    label_import,
    resolve,
    resolve_unresolvable,
    submit,
    submit_next,
)
from tests.factories import PairItemFactory, PromptFactory, StudyFactory, UserFactory

# --- assignment ----------------------------------------------------------------------------


def test_queue_gives_the_first_images_in_id_order(study, annotator_a, make_items):
    images = make_items(3)
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert [seat.item for seat in seats] == images[:2]
    assert [seat.slot for seat in seats] == [0, 0]


def test_queue_returns_the_same_open_seats_when_asked_again(study, annotator_a, make_items):
    make_items(4)
    first = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    again = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert [s.pk for s in again] == [s.pk for s in first]
    assert Assignment.objects.count() == 2


def test_queue_tops_up_to_size_after_a_label(study, annotator_a, make_items):
    images = make_items(4)
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    submit(item=seats[0].item, annotator=annotator_a, value="male")
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert [seat.item for seat in seats] == images[1:3]


def test_third_annotator_gets_no_image_already_labelled_twice(
    study, annotator_a, annotator_b, annotator_c, make_items
):
    images = make_items(2)
    study.annotators.add(annotator_c)
    for annotator in (annotator_a, annotator_b):
        seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
        submit(item=seat.item, annotator=annotator, value="male")
    seats = services.assignment_queue(study=study, annotator=annotator_c, size=2)
    assert [seat.item for seat in seats] == [images[1]]


def test_second_annotator_gets_the_same_image_on_the_next_slot(study, annotator_a, annotator_b, make_items):
    images = make_items(1)
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    seat_b = services.assignment_queue(study=study, annotator=annotator_b, size=1)[0]
    assert seat_b.item == images[0]
    assert seat_b.slot == 1


def test_a_seat_lost_to_a_concurrent_claim_is_not_taken_again_below_a_seat_won(
    study, annotator_a, annotator_b, make_items
):
    """Going back to a lower item after winning a higher one would wait on rows in the other
    order from other claimers: a deadlock on PostgreSQL. The lower item stays claimable."""
    low, high = make_items(2)
    services.assignment_queue(study=study, annotator=annotator_b, size=1)  # takes low's slot 0
    now = timezone.now()
    stale = {low.pk: [], high.pk: []}  # read before annotator_b's claim
    won, _last = claims._seats_take(study=study, annotator=annotator_a, candidates=stale, need=2, now=now)
    assert won == 1
    assert list(Assignment.objects.filter(annotator=annotator_a).values_list("item", flat=True)) == [high.pk]
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert {(seat.item_id, seat.slot) for seat in seats} == {(low.pk, 1), (high.pk, 0)}


def test_a_seat_lost_with_nothing_won_takes_the_next_slot(study, annotator_a, annotator_b, make_items):
    (item,) = make_items(1)
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    won, _last = claims._seats_take(
        study=study, annotator=annotator_a, candidates={item.pk: []}, need=1, now=timezone.now()
    )
    assert won == 1
    assert Assignment.objects.get(annotator=annotator_a).slot == 1


def test_same_annotator_never_gets_an_image_twice(study, annotator_a, make_items):
    make_items(3)
    seen = []
    while seats := services.assignment_queue(study=study, annotator=annotator_a, size=2):
        seen.append(seats[0].item_id)
        submit(item=seats[0].item, annotator=annotator_a, value="female")
    assert len(seen) == len(set(seen)) == 3
    assert services.assignment_queue(study=study, annotator=annotator_a) == []


def test_expired_seat_returns_to_the_pool(study, annotator_a, annotator_b, annotator_c, make_items):
    image = make_items(1)[0]
    study.annotators.add(annotator_c)
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    assert services.assignment_queue(study=study, annotator=annotator_c, size=1) == []

    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 1)
    seats = services.assignment_queue(study=study, annotator=annotator_c, size=1, now=later)
    assert [seat.item for seat in seats] == [image]
    assert seats[0].slot == 0  # the lowest freed slot is reused
    assert set(Assignment.objects.values_list("annotator__username", flat=True)) == {"cleo"}


def test_annotator_whose_seat_expired_unclaimed_keeps_it(study, annotator_a, make_items):
    make_items(1)
    seat = services.assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 1)
    again = services.assignment_queue(study=study, annotator=annotator_a, size=1, now=later)
    assert [s.pk for s in again] == [seat.pk]
    assert again[0].expires_at > later


def test_annotator_whose_seat_was_taken_after_expiry_cannot_submit(
    study, annotator_a, annotator_b, make_items
):
    study.labels_per_item = 1
    study.save()
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 1)
    services.assignment_queue(study=study, annotator=annotator_b, size=1, now=later)
    with pytest.raises(NotAssigned, match="expired"):
        submit(item=image, annotator=annotator_a, value="male")


def test_queue_skips_images_with_a_resolved_final_label(study, annotator_a, researcher, make_items):
    images = make_items(2)
    final_set(item=images[0], value="male", decided_by=researcher)
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    assert [seat.item for seat in seats] == [images[1]]


def test_queue_refuses_user_not_in_study(study, outsider, make_items):
    make_items(1)
    with pytest.raises(NotAssigned, match="not an annotator"):
        services.assignment_queue(study=study, annotator=outsider)


# --- submit --------------------------------------------------------------------------------


def test_submit_stores_value_duration_and_history(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    label = submit(item=image, annotator=annotator_a, value="male", duration_ms=1234)
    assert (label.value, label.duration_ms) == ("male", 1234)
    assert Assignment.objects.get(item=image, annotator=annotator_a).completed_at is not None
    assert list(LabelRevision.objects.values_list("value", "changed_by__username")) == [("male", "anna")]


def test_double_submit_with_same_request_id_is_stored_once(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    first = submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    second = submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    assert second.pk == first.pk
    assert Label.objects.get().value == "male"
    assert LabelRevision.objects.count() == 1


def test_the_same_request_id_with_another_answer_is_refused_not_dropped(study, annotator_a, make_items):
    """Regression: a page the Back button restored posts its request id again with a new answer.
    It used to get the next item while the new answer was silently dropped."""
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    with pytest.raises(StaleSubmit, match="already labelled — reload"):
        submit(item=image, annotator=annotator_a, value="female", request_id="r1")
    assert Label.objects.get().value == "male"
    assert LabelRevision.objects.count() == 1


def test_double_submit_of_same_value_is_stored_once(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    submit(item=image, annotator=annotator_a, value="other", reason="a cartoon")
    submit(item=image, annotator=annotator_a, value="other", reason=" a cartoon ")
    assert Label.objects.count() == 1
    assert LabelRevision.objects.count() == 1


def test_invalid_label_names_the_valid_values(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    with pytest.raises(InvalidLabel, match="male, female, low_quality, other"):
        submit(item=image, annotator=annotator_a, value="robot")
    assert not Label.objects.exists()


def test_other_without_reason_is_refused(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    with pytest.raises(InvalidLabel, match="needs a short reason"):
        submit(item=image, annotator=annotator_a, value="other", reason="   ")
    assert not Label.objects.exists()
    assert Assignment.objects.get().completed_at is None


def test_negative_duration_is_refused(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    with pytest.raises(InvalidLabel, match="milliseconds"):
        submit(item=image, annotator=annotator_a, value="male", duration_ms=-5)


def test_submit_without_a_seat_is_not_assigned(study, annotator_a, make_items):
    image = make_items(1)[0]
    with pytest.raises(NotAssigned, match="not assigned to anna"):
        submit(item=image, annotator=annotator_a, value="male")
    assert not Label.objects.exists()


def test_submit_by_user_not_in_study_is_not_assigned(study, outsider, make_items):
    image = make_items(1)[0]
    with pytest.raises(NotAssigned, match="not an annotator"):
        submit(item=image, annotator=outsider, value="male")


def test_submit_after_removal_from_study_is_not_assigned(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    study.annotators.remove(annotator_a)
    with pytest.raises(NotAssigned):
        submit(item=image, annotator=annotator_a, value="male")


# --- final labels --------------------------------------------------------------------------


def test_agreement_creates_agreed_final_label(study, annotator_a, annotator_b, make_items, label_via_queue):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "female")
    assert not FinalLabel.objects.exists()
    label_via_queue(study, annotator_b, "female")
    final = FinalLabel.objects.get(item=image)
    assert (final.value, final.source, final.decided_by) == ("female", FinalLabelSource.AGREED, None)
    assert FinalLabelRevision.objects.filter(item=image, value="female").count() == 1


def test_disagreement_creates_no_final_label(study, annotator_a, annotator_b, make_items, label_via_queue):
    make_items(1)
    label_via_queue(study, annotator_a, "female")
    label_via_queue(study, annotator_b, "male")
    assert not FinalLabel.objects.exists()


def test_change_that_breaks_agreement_removes_agreed_final_label(
    study, annotator_a, annotator_b, make_items, label_via_queue
):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "female")
    label_via_queue(study, annotator_b, "female")
    submit(item=image, annotator=annotator_b, value="male", change=True)
    assert not FinalLabel.objects.exists()
    assert list(FinalLabelRevision.objects.values_list("value", "source")) == [
        ("female", FinalLabelSource.AGREED),
        ("", FinalLabelSource.AGREED),  # the agreed answer removed
    ]
    # ...and changing back agrees again.
    submit(item=image, annotator=annotator_b, value="female", change=True)
    assert FinalLabel.objects.get().value == "female"
    assert FinalLabelRevision.objects.count() == 3


def test_label_changes_never_touch_a_resolved_final_label(
    study, annotator_a, annotator_b, researcher, make_items, label_via_queue
):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "female")
    label_via_queue(study, annotator_b, "male")
    resolve(item=image, researcher=researcher, value="female", note="long hair")
    with pytest.raises(AlreadyResolved, match="already set to “Female” by a researcher"):
        submit(item=image, annotator=annotator_b, value="female", change=True)
    assert Label.objects.get(annotator=annotator_b).value == "male"
    final = FinalLabel.objects.get()
    assert (final.value, final.source) == ("female", FinalLabelSource.RESOLVED)


def test_stale_submit_after_import_is_already_resolved(study, annotator_a, researcher, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    final_set(item=image, value="male", decided_by=researcher)
    with pytest.raises(AlreadyResolved, match="by an import"):
        submit(item=image, annotator=annotator_a, value="female")
    assert not Label.objects.exists()


# --- undo ----------------------------------------------------------------------------------


def test_previous_walks_back_through_own_labels(study, annotator_a, make_items, label_via_queue):
    images = make_items(3)
    for value in ("male", "female", "low_quality"):
        label_via_queue(study, annotator_a, value)
    latest = services.annotation_previous(study=study, annotator=annotator_a)
    assert latest == images[2]
    one_back = services.annotation_previous(study=study, annotator=annotator_a, before=latest)
    assert one_back == images[1]
    two_back = services.annotation_previous(study=study, annotator=annotator_a, before=one_back)
    assert two_back == images[0]
    with pytest.raises(NothingToUndo):
        services.annotation_previous(study=study, annotator=annotator_a, before=two_back)


def test_previous_from_the_shown_unlabelled_image_is_the_latest_label(
    study, annotator_a, make_items, label_via_queue
):
    images = make_items(2)
    label_via_queue(study, annotator_a, "male")
    shown = services.assignment_queue(study=study, annotator=annotator_a, size=1)[0].item
    assert services.annotation_previous(study=study, annotator=annotator_a, before=shown) == images[0]


def test_previous_with_no_labels_is_nothing_to_undo(study, annotator_a, make_items):
    make_items(1)
    with pytest.raises(NothingToUndo):
        services.annotation_previous(study=study, annotator=annotator_a)


def test_previous_never_returns_another_annotators_label(
    study, annotator_a, annotator_b, make_items, label_via_queue
):
    make_items(1)
    label_via_queue(study, annotator_b, "male")
    with pytest.raises(NothingToUndo):
        services.annotation_previous(study=study, annotator=annotator_a)


def test_undo_then_change_keeps_history(study, annotator_a, make_items, label_via_queue):
    make_items(2)
    label_via_queue(study, annotator_a, "male")
    label_via_queue(study, annotator_a, "female")
    previous = services.annotation_previous(study=study, annotator=annotator_a)
    before = Label.objects.get(item=previous, annotator=annotator_a)
    changed = submit(item=previous, annotator=annotator_a, value="other", reason="two people", change=True)
    assert changed.pk == before.pk
    assert list(changed.revisions.values_list("value", "reason")) == [("female", ""), ("other", "two people")]
    assert Label.objects.count() == 2


# --- disputes ------------------------------------------------------------------------------


@pytest.fixture
def disputed_image(study, annotator_a, annotator_b, make_items, label_via_queue):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "female")
    label_via_queue(study, annotator_b, "male")
    return image


def test_resolve_then_re_resolve_keeps_history(disputed_image, researcher, admin_user):
    resolve(item=disputed_image, researcher=researcher, value="female", note="dress")
    final = resolve(item=disputed_image, researcher=admin_user, value="male", note="beard")
    assert (final.value, final.decided_by, final.note) == ("male", admin_user, "beard")
    history = FinalLabelRevision.objects.filter(item=disputed_image)
    assert list(history.values_list("value", "decided_by__username", "note")) == [
        ("female", "rita", "dress"),
        ("male", "adam", "beard"),
    ]
    assert all(rev.decided_at for rev in history)


def test_resolving_twice_the_same_way_is_stored_once(disputed_image, researcher):
    resolve(item=disputed_image, researcher=researcher, value="female")
    resolve(item=disputed_image, researcher=researcher, value="female")
    assert FinalLabelRevision.objects.count() == 1


def test_unresolvable_dispute_becomes_low_quality(disputed_image, researcher):
    final = resolve_unresolvable(item=disputed_image, researcher=researcher)
    assert (final.value, final.source, final.decided_by) == (
        "low_quality",
        FinalLabelSource.RESOLVED,
        researcher,
    )
    assert final.note


def test_resolving_an_image_that_is_not_disputed_is_refused(
    study, researcher, make_items, label_via_queue, annotator_a
):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "male")
    with pytest.raises(NotDisputed, match="in progress"):
        resolve(item=image, researcher=researcher, value="male")
    assert not FinalLabel.objects.exists()


def test_resolve_with_unknown_value_is_invalid(disputed_image, researcher):
    with pytest.raises(InvalidLabel, match="Valid labels"):
        resolve(item=disputed_image, researcher=researcher, value="robot")
    assert not FinalLabel.objects.exists()


def test_final_label_set_overrides_agreement_and_keeps_history(
    study, annotator_a, annotator_b, researcher, make_items, label_via_queue
):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "male")
    label_via_queue(study, annotator_b, "male")
    final = final_set(item=image, value="female", decided_by=researcher, note="released set")
    assert (final.source, final.decided_by) == (FinalLabelSource.IMPORTED, researcher)
    assert list(FinalLabelRevision.objects.values_list("value", "source")) == [
        ("male", FinalLabelSource.AGREED),
        ("female", FinalLabelSource.IMPORTED),
    ]


def test_final_label_set_refuses_unknown_value(study, researcher, make_items):
    image = make_items(1)[0]
    with pytest.raises(InvalidLabel):
        final_set(item=image, value="robot", decided_by=researcher)
    assert not FinalLabelRevision.objects.exists()


# --- import --------------------------------------------------------------------------------


def test_label_import_adds_annotator_and_completed_seat(study, make_items):
    image = make_items(1)[0]
    newcomer = UserFactory(username="nina")
    label = label_import(item=image, annotator=newcomer, value="male")
    assert label.value == "male"
    assert study.annotators.filter(pk=newcomer.pk).exists()
    assert Assignment.objects.get(annotator=newcomer).completed_at is not None


def test_label_import_twice_changes_nothing(study, annotator_a, make_items):
    image = make_items(1)[0]
    label_import(item=image, annotator=annotator_a, value="male")
    label_import(item=image, annotator=annotator_a, value="male")
    assert Label.objects.count() == LabelRevision.objects.count() == Assignment.objects.count() == 1


def test_label_import_agreement_creates_final_label(study, annotator_a, annotator_b, make_items):
    image = make_items(1)[0]
    label_import(item=image, annotator=annotator_a, value="female")
    label_import(item=image, annotator=annotator_b, value="female")
    assert FinalLabel.objects.get(item=image).source == FinalLabelSource.AGREED


def test_label_import_on_full_image_is_image_full(study, annotator_a, annotator_b, make_items):
    image = make_items(1)[0]
    label_import(item=image, annotator=annotator_a, value="male")
    label_import(item=image, annotator=annotator_b, value="male")
    third = UserFactory(username="tom")
    with pytest.raises(ItemFull, match=r"already has its 2 annotators \(anna, ben\)"):
        label_import(item=image, annotator=third, value="male")
    assert not study.annotators.filter(pk=third.pk).exists()
    assert Label.objects.count() == 2


def test_label_import_with_invalid_label_writes_nothing(study, make_items):
    image = make_items(1)[0]
    newcomer = UserFactory(username="nina")
    with pytest.raises(InvalidLabel):
        label_import(item=image, annotator=newcomer, value="robot")
    assert not Assignment.objects.exists()
    assert not study.annotators.filter(pk=newcomer.pk).exists()


def test_completed_seats_counts_each_annotator_once(
    study, annotator_a, annotator_b, make_items, label_via_queue
):
    image = make_items(1)[0]
    label_via_queue(study, annotator_a, "male")
    label_via_queue(study, annotator_b, "female")
    submit(item=image, annotator=annotator_b, value="male", change=True)
    image.refresh_from_db()
    assert image.completed_seats == 2


def test_completed_seats_stay_exact_after_double_stale_and_refused_submits(
    study, annotator_a, annotator_b, make_items
):
    # The item lock counts the seat in advance; every submit that completes none must give it back.
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    with pytest.raises(InvalidLabel):
        submit(item=image, annotator=annotator_a, value="robot")
    with pytest.raises(NotAssigned):
        submit(item=image, annotator=annotator_b, value="male")
    submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    submit(item=image, annotator=annotator_a, value="male", request_id="r1")  # double submit
    with pytest.raises(StaleSubmit):
        submit(item=image, annotator=annotator_a, value="female", request_id="r2")
    submit(item=image, annotator=annotator_a, value="female", request_id="r3", change=True)
    image.refresh_from_db()
    assert image.completed_seats == 1
    assert Label.objects.get().value == "female"


def test_active_annotator_keeps_the_preloaded_seat_past_the_timeout(
    study, annotator_a, annotator_b, make_items
):
    study.labels_per_item = 1
    study.save()
    make_items(2)
    first, preloaded = services.assignment_queue(study=study, annotator=annotator_a, size=2)
    # Anna spends longer than the timeout on the first image, then labels it and asks again.
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds - 10)
    submit(item=first.item, annotator=annotator_a, value="male")
    queue = services.assignment_queue(study=study, annotator=annotator_a, size=2, now=later)
    assert [seat.pk for seat in queue] == [preloaded.pk]
    much_later = later + timedelta(seconds=20)  # past the first claim's expiry, not the renewed one
    assert services.assignment_queue(study=study, annotator=annotator_b, size=2, now=much_later) == []


def test_previous_skips_labels_a_researcher_already_decided(
    study, annotator_a, annotator_b, researcher, make_items, label_via_queue
):
    images = make_items(2)
    label_via_queue(study, annotator_a, "male")
    label_via_queue(study, annotator_a, "female")
    final_set(item=images[1], value="female", decided_by=researcher)
    assert services.annotation_previous(study=study, annotator=annotator_a) == images[0]


def test_resubmitting_the_same_request_after_a_change_stores_nothing_new(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    submit(item=image, annotator=annotator_a, value="female", request_id="r2", change=True)
    submit(item=image, annotator=annotator_a, value="female", request_id="r2")
    assert list(LabelRevision.objects.values_list("value", flat=True)) == ["male", "female"]


def test_late_retry_of_an_earlier_request_does_not_undo_a_correction(study, annotator_a, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    submit(item=image, annotator=annotator_a, value="male", request_id="r1", change=True)
    submit(item=image, annotator=annotator_a, value="female", request_id="r2", change=True)
    label = submit(item=image, annotator=annotator_a, value="male", request_id="r1")
    assert label.value == "female"
    assert list(LabelRevision.objects.values_list("value", "request_id")) == [
        ("male", "r1"),
        ("female", "r2"),
    ]


# --- queue levels ------------------------------------------------------------------------------


def test_items_out_of_the_queue_are_never_handed_out_or_counted(study, annotator_a, make_items):
    from annotate import selectors
    from studies.models import Item

    items = make_items(3)
    Item.objects.filter(pk=items[0].pk).update(queue=0)
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=3)
    assert [seat.item for seat in seats] == items[1:]
    assert selectors.annotator_progress(study=study, annotator=annotator_a).remaining == 2


def test_a_sampling_rounds_items_are_handed_out_first(study, annotator_a, make_items):
    from studies.models import Item

    items = make_items(4)
    Item.objects.filter(pk__in=[items[2].pk, items[3].pk]).update(queue=2)
    study.priority_queue = True
    study.save(update_fields=["priority_queue"])
    seats = services.assignment_queue(study=study, annotator=annotator_a, size=3)
    assert [seat.item for seat in seats] == [items[2], items[3], items[0]]


# --- reasons, changes under the lock, history -------------------------------------------


def test_a_reason_is_kept_only_with_the_answer_that_asks_for_it(study, annotator_a, make_items):
    """Regression: O, a reason, Enter, then Z and F stored "female" with the old reason."""
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    submit(item=image, annotator=annotator_a, value="other", reason="cartoon, not a photo")
    # The change form still carries the reason typed for "other".
    label = submit(
        item=image, annotator=annotator_a, value="female", reason="cartoon, not a photo", change=True
    )
    assert (label.value, label.reason) == ("female", "")
    assert Label.objects.get().reason == ""
    assert list(LabelRevision.objects.values_list("value", "reason")) == [
        ("other", "cartoon, not a photo"),
        ("female", ""),
    ]


def test_an_imported_label_keeps_a_reason_only_for_other(study, annotator_a, make_items):
    male, other = make_items(2)
    assert label_import(item=male, annotator=annotator_a, value="male", reason="looks male").reason == ""
    assert label_import(item=other, annotator=annotator_a, value="other", reason="a doll").reason == "a doll"


def test_a_label_change_writes_only_that_label_and_builds_on_what_the_lock_protects(
    pair_study_items, annotator_a, monkeypatch
):
    """Lost update, made deterministic: another change to the item's "skin" answer
    commits while this change to "age" waits for the item lock. The old API read every answer
    before the lock and wrote them all back, reverting "skin"."""
    study, item = pair_study_items
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    labels = services.annotation_submit(item=item, annotator=annotator_a, answers=PAIR_ANSWERS)
    age = next(label for label in labels if label.question.key == "age")
    skin = next(label for label in labels if label.question.key == "skin")
    _other_writer_commits_before_the_lock(
        monkeypatch, lambda: Label.objects.filter(pk=skin.pk).update(value="darker")
    )

    changed = services.label_change(label=age, annotator=annotator_a, value="younger")

    assert changed.value == "younger"
    stored = dict(Label.objects.filter(item=item).values_list("question__key", "value"))
    assert stored == {**PAIR_ANSWERS, "age": "younger", "skin": "darker"}
    # Only the changed answer got a revision.
    assert LabelRevision.objects.filter(label=age).count() == 2
    assert LabelRevision.objects.filter(label=skin).count() == 1


def test_a_label_change_is_refused_for_someone_elses_label(study, annotator_a, annotator_b, make_items):
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    label = submit(item=image, annotator=annotator_a, value="male")
    with pytest.raises(NotAssigned):
        services.label_change(label=label, annotator=annotator_b, value="female")
    assert Label.objects.get().value == "male"


def test_a_label_change_keeps_the_agreed_final_label_in_step(study, annotator_a, annotator_b, make_items):
    image = make_items(1)[0]
    for annotator in (annotator_a, annotator_b):
        services.assignment_queue(study=study, annotator=annotator, size=1)
        submit(item=image, annotator=annotator, value="male")
    label = Label.objects.get(annotator=annotator_a)
    services.label_change(label=label, annotator=annotator_a, value="female")
    assert not FinalLabel.objects.exists()
    services.label_change(label=label, annotator=annotator_a, value="male")
    assert FinalLabel.objects.get().value == "male"


def test_a_broken_agreement_is_recorded_with_a_valid_source(study, annotator_a, annotator_b, make_items):
    """Regression: "Agreement broken" revisions carried source "", outside the API's enum."""
    image = make_items(1)[0]
    for annotator in (annotator_a, annotator_b):
        services.assignment_queue(study=study, annotator=annotator, size=1)
        submit(item=image, annotator=annotator, value="male")
    submit(item=image, annotator=annotator_a, value="female", change=True)
    removal = FinalLabelRevision.objects.get(value="")
    assert removal.note.startswith("Agreement broken")
    assert removal.source in FinalLabelSource.values
    assert removal.source == FinalLabelSource.AGREED


@pytest.mark.parametrize("path", ["submit", "submit_next", "change", "import"])
def test_history_times_are_taken_after_the_item_lock_is_granted(
    path, study, annotator_a, annotator_b, make_items, monkeypatch
):
    """Regression: the time was read before waiting for the item lock, so a write that waited
    got an earlier time than the one it waited for, and history sorted by time could end with
    "Agreement broken" while an agreed final label existed. Here the clock moves on while the
    lock is waited for: every time written must be at least the moment the lock was granted."""
    image = make_items(1)[0]
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    submit(item=image, annotator=annotator_b, value="male")
    services.assignment_queue(study=study, annotator=annotator_a, size=1)
    if path == "change":
        submit(item=image, annotator=annotator_a, value="female")
    clock = {"now": timezone.now() + timedelta(minutes=1)}
    monkeypatch.setattr(timezone, "now", lambda: clock["now"])
    granted = clock["now"] + timedelta(seconds=30)

    def wait_for_the_lock() -> None:
        clock["now"] = granted  # another writer held the lock for 30 s

    _other_writer_commits_before_the_lock(monkeypatch, wait_for_the_lock)
    if path == "submit":
        submit(item=image, annotator=annotator_a, value="male")
    elif path == "submit_next":
        submit_next(study=study, annotator=annotator_a, item_id=image.pk, value="male")
    elif path == "change":
        services.label_change(
            label=Label.objects.get(annotator=annotator_a), annotator=annotator_a, value="male"
        )
    else:
        label_import(item=image, annotator=annotator_a, value="male")

    revision = LabelRevision.objects.filter(changed_by=annotator_a).latest("id")
    final = FinalLabel.objects.get(item=image)
    assert revision.changed_at >= granted
    assert final.decided_at >= granted
    assert FinalLabelRevision.objects.latest("id").decided_at >= granted


def _other_writer_commits_before_the_lock(monkeypatch, other_write) -> None:
    """Run ``other_write`` once, just before the next item lock is taken: what another writer,
    holding the lock, commits while this one waits for it."""
    pending = [other_write]

    def wrap(lock):
        def locked(*args, **kwargs):
            while pending:
                pending.pop()()
            return lock(*args, **kwargs)

        return locked

    monkeypatch.setattr(locks, "lock_item", wrap(locks.lock_item))
    monkeypatch.setattr(locks, "lock_item_for_label", wrap(locks.lock_item_for_label))


PAIR_ANSWERS = {"age": "older", "gender": "male_female", "skin": "same"}


@pytest.fixture
def pair_study_items(annotator_a, annotator_b):
    study = StudyFactory(name="Pairs", slug="pairs", protocol="pair_change")
    study.annotators.add(annotator_a, annotator_b)
    return study, PairItemFactory(prompt=PromptFactory(study=study))
