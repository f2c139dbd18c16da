"""Excluding an annotator: labels stop counting, finals and disputes follow, seats reopen;
re-including puts it back."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from annotate import selectors, services
from annotate.errors import NotAssigned
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from quality.errors import QualityError
from quality.models import AnnotatorExclusion, ExcludedLabel
from quality.services import annotator_exclude, annotator_include
from tests.factories import ItemFactory, PromptFactory


@pytest.fixture
def labelled(study, annotator_a, annotator_b):
    """Three items: 0 agreed (male/male), 1 disputed (male/female), 2 labelled by A only."""
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(3)]
    answers = {annotator_a: ["male", "male", "male"], annotator_b: ["male", "female"]}
    for annotator, values in answers.items():
        for item, value in zip(items, values, strict=False):
            Assignment.objects.create(
                item=item,
                annotator=annotator,
                slot=0 if annotator == annotator_a else 1,
                claimed_at="2026-01-01T00:00Z",
                expires_at="2026-01-01T01:00Z",
            )
            services.annotation_submit(item=item, annotator=annotator, answers={"gender": value})
    return items


def test_excluding_removes_their_labels_from_finals_disputes_and_seats(
    study, labelled, annotator_a, annotator_b
):
    agreed, disputed, _single = labelled
    assert FinalLabel.objects.filter(item=agreed).exists()
    assert [row.item.pk for row in selectors.dispute_queue(study=study)] == [disputed.pk]
    exclusion = annotator_exclude(study=study, annotator=annotator_b, actor="rita", reason="random clicks")
    assert (exclusion.labels_moved, exclusion.finals_changed) == (2, 1)
    assert not Label.objects.filter(annotator=annotator_b).exists()
    assert ExcludedLabel.objects.filter(exclusion=exclusion).count() == 2
    # The agreed final label is gone, with a revision saying why; the dispute is gone too.
    assert not FinalLabel.objects.filter(item=agreed).exists()
    revision = FinalLabelRevision.objects.filter(item=agreed).latest("id")
    assert revision.value == ""
    assert "ben excluded by rita" in revision.note
    assert selectors.dispute_queue(study=study) == []
    # Seats reopen: each item has one completed seat, and another annotator can claim it.
    assert not Assignment.objects.filter(annotator=annotator_b).exists()
    assert sorted(
        item.completed_seats for item in type(agreed).objects.filter(pk__in=[i.pk for i in labelled])
    ) == [1, 1, 1]
    # They can no longer label the study.
    with pytest.raises(NotAssigned):
        services.assignment_queue(study=study, annotator=annotator_b)


def test_an_excluded_annotators_seats_go_to_others(study, labelled, annotator_a, annotator_b, annotator_c):
    annotator_exclude(study=study, annotator=annotator_b, actor="rita")
    study.annotators.add(annotator_c)
    queue = services.assignment_queue(study=study, annotator=annotator_c, size=3)
    assert {seat.item.pk for seat in queue} == {item.pk for item in labelled}


def test_reincluding_puts_labels_history_and_finals_back(study, labelled, annotator_a, annotator_b):
    agreed, disputed, _single = labelled
    history_before = list(
        LabelRevision.objects.filter(label__annotator=annotator_b).values_list("value", "changed_at")
    )
    annotator_exclude(study=study, annotator=annotator_b, actor="rita")
    exclusion = annotator_include(study=study, annotator=annotator_b, actor="rita")
    assert exclusion.labels_returned == 2
    assert exclusion.included_at is not None
    assert sorted(Label.objects.filter(annotator=annotator_b).values_list("item_id", "value")) == [
        (agreed.pk, "male"),
        (disputed.pk, "female"),
    ]
    assert (
        list(LabelRevision.objects.filter(label__annotator=annotator_b).values_list("value", "changed_at"))
        == history_before
    )
    assert FinalLabel.objects.get(item=agreed).value == "male"
    assert [row.item.pk for row in selectors.dispute_queue(study=study)] == [disputed.pk]
    assert study.annotators.filter(pk=annotator_b.pk).exists()
    assert not ExcludedLabel.objects.exists()


def test_a_label_whose_seat_was_taken_meanwhile_stays_out(
    study, labelled, annotator_a, annotator_b, annotator_c
):
    agreed = labelled[0]
    annotator_exclude(study=study, annotator=annotator_b, actor="rita")
    study.annotators.add(annotator_c)
    Assignment.objects.create(
        item=agreed,
        annotator=annotator_c,
        slot=1,
        claimed_at="2026-01-01T00:00Z",
        expires_at="2026-01-01T01:00Z",
    )
    services.annotation_submit(item=agreed, annotator=annotator_c, answers={"gender": "female"})
    exclusion = annotator_include(study=study, annotator=annotator_b, actor="rita")
    assert (exclusion.labels_moved, exclusion.labels_returned) == (2, 1)
    assert Label.objects.filter(item=agreed).count() == study.labels_per_item
    assert ExcludedLabel.objects.get().item_id == agreed.pk


def test_excluding_twice_or_including_someone_not_excluded_is_refused(study, labelled, annotator_b):
    with pytest.raises(QualityError, match="not excluded"):
        annotator_include(study=study, annotator=annotator_b, actor="rita")
    annotator_exclude(study=study, annotator=annotator_b, actor="rita")
    with pytest.raises(QualityError, match="already excluded"):
        annotator_exclude(study=study, annotator=annotator_b, actor="rita")
    assert AnnotatorExclusion.objects.count() == 1


def test_the_command_excludes_and_reincludes(study, labelled, annotator_b):
    out = StringIO()
    call_command("exclude_annotator", "ben", "--study", study.slug, "--reason", "gold", stdout=out)
    assert (
        "Excluded ben from 'gender': 2 label(s) set aside, 1 agreed final label(s) changed." in out.getvalue()
    )
    call_command("exclude_annotator", "ben", "--study", study.slug, "--include", stdout=out)
    assert "2 of 2 label(s) back" in out.getvalue()
    with pytest.raises(CommandError, match="no user named 'zed'"):
        call_command("exclude_annotator", "zed", "--study", study.slug)
