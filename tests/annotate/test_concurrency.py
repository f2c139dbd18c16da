"""Annotators working at the same moment never push an item past N labels, and never leave a
final label that disagrees with the labels (PostgreSQL).

Real threads, each with its own database connection, claim and submit concurrently. On SQLite
writes are serial anyway, so these tests only run against PostgreSQL (DATABASE_URL).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.db.models import Count
from django.utils import timezone

from annotate import services
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, FinalLabelSource, Label
from studies.models import Item
from tests.annotate.gender import (
    submit,
    submit_next,
)
from tests.factories import ItemFactory, PairItemFactory, PromptFactory, StudyFactory, UserFactory

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL (DATABASE_URL=postgres://…)"
    ),
]

THREADS = 8


def _run_in_threads(work: Callable[[int], None], count: int) -> list[BaseException]:
    """Start ``count`` threads at the same moment; return the errors they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            barrier.wait()
            work(index)
        except BaseException as exc:  # collected and asserted on by the test
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own connection: give it back

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung (deadlock?)"
    return errors


def _study_with(n_images: int, n_annotators: int, labels_per_item: int = 2):
    study = StudyFactory(labels_per_item=labels_per_item)
    annotators = [UserFactory(username=f"worker{i}", role="annotator") for i in range(n_annotators)]
    study.annotators.add(*annotators)
    prompt = PromptFactory(study=study)
    images = [ItemFactory(prompt=prompt) for _ in range(n_images)]
    return study, annotators, images


def test_concurrent_annotators_never_push_an_image_past_n_labels():
    study, annotators, images = _study_with(n_images=6, n_annotators=THREADS)
    given: dict[str, list[int]] = {a.username: [] for a in annotators}
    values = ["male", "female"]

    def work(index: int) -> None:
        annotator = annotators[index]
        while seats := services.assignment_queue(study=study, annotator=annotator, size=2):
            image = seats[0].item
            given[annotator.username].append(image.pk)
            submit(
                item=image,
                annotator=annotator,
                value=values[(index + image.pk) % 2],
                request_id=f"{index}-{image.pk}",
            )

    errors = _run_in_threads(work, THREADS)

    assert errors == []
    per_image = dict(Label.objects.values_list("item").annotate(n=Count("id")))
    assert per_image == {image.pk: 2 for image in images}  # every image exactly N labels
    seats = Assignment.objects.values("item").annotate(n=Count("id"))
    assert max(row["n"] for row in seats) == 2
    for username, image_ids in given.items():
        assert len(image_ids) == len(set(image_ids)), f"{username} got an image twice"
    assert sum(len(ids) for ids in given.values()) == 12


def test_concurrent_final_submits_on_one_image_keep_the_final_label_consistent():
    """N annotators finishing the same images at the same moment: every image whose N labels
    agree gets its agreed final label, and no disagreeing image gets one."""
    study, annotators, images = _study_with(n_images=4, n_annotators=3, labels_per_item=3)
    # Every annotator first holds a seat on every image, then all submit at once.
    for annotator in annotators:
        services.assignment_queue(study=study, annotator=annotator, size=len(images))
    plan = {images[0].pk: "male", images[1].pk: "female", images[2].pk: "low_quality"}

    def work(index: int) -> None:
        for image in images:
            value = plan.get(image.pk, ["male", "female", "male"][index])
            submit(item=image, annotator=annotators[index], value=value)

    errors = _run_in_threads(work, len(annotators))

    assert errors == []
    finals = dict(FinalLabel.objects.values_list("item_id", "value"))
    assert finals == plan
    assert set(FinalLabel.objects.values_list("source", flat=True)) == {FinalLabelSource.AGREED}


def test_concurrent_claims_for_the_last_free_seats_hand_each_out_once():
    """More annotators than free seats ask for work at the same moment."""
    study, annotators, images = _study_with(n_images=2, n_annotators=THREADS)
    won: list[tuple[str, int]] = []

    def work(index: int) -> None:
        for seat in services.assignment_queue(study=study, annotator=annotators[index], size=2):
            won.append((annotators[index].username, seat.item_id))

    errors = _run_in_threads(work, THREADS)

    assert errors == []
    per_image = Counter(image_id for _, image_id in won)
    assert per_image == {image.pk: 2 for image in images}
    assert len(won) == len(set(won))
    assert Assignment.objects.count() == 4


def test_concurrent_claims_on_abandoned_seats_free_each_slot_once():
    """Every seat of every image was abandoned; after the timeout, all threads ask for work
    at the same moment: the freed slots are reused, never beyond N per image."""
    study, annotators, images = _study_with(n_images=3, n_annotators=THREADS + 2)
    quitters, workers = annotators[:2], annotators[2:]
    for quitter in quitters:
        services.assignment_queue(study=study, annotator=quitter, size=len(images))
    later = timezone.now() + timedelta(seconds=study.claim_timeout_seconds + 5)
    won: list[tuple[int, int]] = []

    def work(index: int) -> None:
        for seat in services.assignment_queue(study=study, annotator=workers[index], size=2, now=later):
            won.append((workers[index].pk, seat.item_id))

    errors = _run_in_threads(work, THREADS)

    assert errors == []
    assert len(won) == len(set(won)) == 6  # 3 images x N freed seats, each handed out once
    seats = Assignment.objects.values("item").annotate(n=Count("id"))
    assert {row["n"] for row in seats} == {2}
    assert not Assignment.objects.filter(annotator__in=quitters).exists()


def test_concurrent_key_presses_that_submit_and_claim_in_one_transaction_keep_n_labels_per_item():
    """The labeling screen's path: each submit holds its image's lock while it claims the next
    seat. Annotators doing that at once neither deadlock nor push an image past N labels."""
    study, annotators, images = _study_with(n_images=10, n_annotators=THREADS)
    values = ["male", "female"]
    given: dict[int, list[int]] = {index: [] for index in range(THREADS)}

    def work(index: int) -> None:
        annotator = annotators[index]
        queue = services.assignment_queue(study=study, annotator=annotator, size=2)
        while queue:
            image_id = queue[0].item_id
            given[index].append(image_id)
            outcome = submit_next(
                study=study,
                annotator=annotator,
                item_id=image_id,
                value=values[(index + image_id) % 2],
                request_id=f"{index}-{image_id}",
            )
            assert outcome.labels[0].item_id == image_id
            queue = outcome.queue

    errors = _run_in_threads(work, THREADS)

    assert errors == []
    per_image = dict(Label.objects.values_list("item").annotate(n=Count("id")))
    assert per_image == {image.pk: 2 for image in images}
    for image_ids in given.values():
        assert len(image_ids) == len(set(image_ids))
    completed = dict(
        Assignment.objects.filter(completed_at__isnull=False).values_list("item").annotate(n=Count("id"))
    )
    assert completed == per_image
    # The counter handing out work (bumped, not recounted, under the image lock) is exact.
    assert dict(Item.objects.values_list("pk", "completed_seats")) == per_image


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_concurrent_label_changes_keep_the_final_label_in_step_with_the_labels(order):
    """two annotators change their answers on the same item at the
    same moment, round after round. The final label must always be the one the labels agree
    on (or none when they differ), and no request may fail."""
    study, annotators, [item] = _study_with(n_images=1, n_annotators=2)
    pair = annotators if order == "a_first" else annotators[::-1]
    for annotator in pair:
        services.assignment_queue(study=study, annotator=annotator, size=1)
        submit(item=item, annotator=annotator, value="male")
    plans = [
        ("female", "female"),
        ("male", "female"),
        ("male", "male"),
        ("female", "male"),
        ("female", "female"),
    ]
    for round_number, values in enumerate(plans * 3):

        def work(index: int, values: tuple[str, str] = values, round_number: int = round_number) -> None:
            submit(
                item=item,
                annotator=pair[index],
                value=values[index],
                request_id=f"r{round_number}-{index}",
                change=True,
            )

        errors = _run_in_threads(work, 2)
        assert errors == []
        labels = sorted(Label.objects.filter(item=item).values_list("value", flat=True))
        final = FinalLabel.objects.filter(item=item).values_list("value", "source").first()
        if len(set(labels)) == 1:
            assert final == (labels[0], FinalLabelSource.AGREED), f"round {round_number}: {labels} vs {final}"
        else:
            assert final is None, f"round {round_number}: labels {labels} differ but final is {final}"


# --- regressions ------------------------------------------------------------------------------

PAIR_ANSWERS = {"age": "older", "gender": "male_female", "skin": "same"}


def _api_for(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


def test_concurrent_changes_to_different_answers_of_one_item_both_last():
    """Lost update: two PATCHes of different questions of one item, at the same moment,
    both answered 200 and one was reverted (13 of 13 pairs on PostgreSQL): each read the other
    answers before the item lock and wrote them all back."""
    study = StudyFactory(slug="pairs", protocol="pair_change")
    annotator = UserFactory(username="worker", role="annotator")
    study.annotators.add(annotator)
    item = PairItemFactory(prompt=PromptFactory(study=study))
    services.assignment_queue(study=study, annotator=annotator, size=1)
    labels = services.annotation_submit(item=item, annotator=annotator, answers=PAIR_ANSWERS)
    ids = {label.question.key: label.pk for label in labels}
    rounds = [("younger", "darker"), ("older", "lighter"), ("same", "same")] * 4
    for round_number, (age, skin) in enumerate(rounds):
        changes = [("age", age), ("skin", skin)]
        statuses: list[int] = []

        def work(
            index: int, changes: list[tuple[str, str]] = changes, statuses: list[int] = statuses
        ) -> None:
            key, value = changes[index]
            response = _api_for(annotator).patch(f"/api/labels/{ids[key]}/", {"value": value}, format="json")
            statuses.append(response.status_code)

        errors = _run_in_threads(work, 2)
        assert errors == []
        assert statuses == [200, 200]
        stored = dict(Label.objects.filter(item=item).values_list("question__key", "value"))
        assert stored == {**PAIR_ANSWERS, "age": age, "skin": skin}, f"round {round_number}: {stored}"


def test_a_change_form_and_an_api_change_at_once_never_revert_each_other():
    """Regression: the same lost update between the HTML change form (all answers of the item) and
    the API (one answer). The form was drawn before the API change: it is stored when it came
    first, refused as stale when it came second — never does it write the old "skin" back."""
    from django.test import Client
    from django.urls import reverse

    study = StudyFactory(slug="pairs", protocol="pair_change")
    annotator = UserFactory(username="worker", role="annotator")
    study.annotators.add(annotator)
    item = PairItemFactory(prompt=PromptFactory(study=study))
    services.assignment_queue(study=study, annotator=annotator, size=1)
    labels = services.annotation_submit(item=item, annotator=annotator, answers=PAIR_ANSWERS)
    skin = next(label.pk for label in labels if label.question.key == "skin")
    outcomes: list[int] = []
    for round_number, (age, new_skin) in enumerate([("younger", "darker"), ("older", "lighter")] * 15):
        stamp = services.label_revision_stamp(item=item, annotator=annotator)
        current = dict(Label.objects.filter(item=item).values_list("question__key", "value"))
        form = {f"answer_{key}": value for key, value in {**current, "age": age}.items()}
        form |= {"change": "1", "seen_revision": str(stamp)}
        statuses: dict[str, int] = {}

        def work(
            index: int, form: dict[str, str] = form, new_skin: str = new_skin, statuses=statuses
        ) -> None:
            if index == 0:
                browser = Client()
                browser.force_login(annotator)
                url = reverse("annotate:label_submit", args=[study.slug, item.pk])
                statuses["form"] = browser.post(url, form, HTTP_HX_REQUEST="true").status_code
            else:
                response = _api_for(annotator).patch(
                    f"/api/labels/{skin}/", {"value": new_skin}, format="json"
                )
                statuses["api"] = response.status_code

        errors = _run_in_threads(work, 2)
        assert errors == []
        assert statuses["api"] == 200
        assert statuses["form"] in (200, 409)
        outcomes.append(statuses["form"])
        stored = dict(Label.objects.filter(item=item).values_list("question__key", "value"))
        assert stored["skin"] == new_skin, f"round {round_number}: the API's change was reverted"
        if statuses["form"] == 200:
            assert stored["age"] == age


def test_a_submit_that_waited_for_the_item_lock_is_timed_after_the_write_it_waited_for():
    """Regression: times were read before the lock wait, so a sorted history could end with
    "Agreement broken" while an agreed final label existed. Here one transaction holds the
    item lock for a moment; the key press waiting for it must be timed after that commit."""
    study, [first, second], [item] = _study_with(n_images=1, n_annotators=2)
    for annotator in (first, second):
        services.assignment_queue(study=study, annotator=annotator, size=1)
    submit(item=item, annotator=first, value="male")
    locked = threading.Event()
    released: dict[str, object] = {}

    def work(index: int) -> None:
        if index == 0:
            from django.db import transaction

            with transaction.atomic():
                Item.objects.select_for_update().get(pk=item.pk)
                locked.set()
                threading.Event().wait(0.5)
                released["at"] = timezone.now()
        else:
            assert locked.wait(10)
            submit_next(study=study, annotator=second, item_id=item.pk, value="male")

    errors = _run_in_threads(work, 2)
    assert errors == []
    final = FinalLabel.objects.get(item=item)
    assert final.decided_at >= released["at"]
    assert Label.objects.get(annotator=second).revisions.get().changed_at >= released["at"]


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_a_sorted_final_label_history_ends_with_the_final_label_that_exists(order):
    """Regression: bursts of changes by two annotators on one item; after each, the final label
    history sorted by time must end with the current state (the agreed answer, or its removal)."""
    study, annotators, [item] = _study_with(n_images=1, n_annotators=2)
    pair = annotators if order == "a_first" else annotators[::-1]
    for annotator in pair:
        services.assignment_queue(study=study, annotator=annotator, size=1)
        submit(item=item, annotator=annotator, value="male")
    plans = [("female", "female"), ("male", "female"), ("male", "male"), ("female", "male")] * 5
    for round_number, values in enumerate(plans):

        def work(index: int, values: tuple[str, str] = values, round_number: int = round_number) -> None:
            submit(
                item=item,
                annotator=pair[index],
                value=values[index],
                request_id=f"r{round_number}-{index}",
                change=True,
            )

        errors = _run_in_threads(work, 2)
        assert errors == []
        final = FinalLabel.objects.filter(item=item).values_list("value", flat=True).first()
        history = sorted(
            FinalLabelRevision.objects.filter(item=item).values_list("decided_at", "id", "value")
        )
        assert history[-1][2] == (final or ""), (
            f"round {round_number}: history ends {history[-1]}, final {final}"
        )
