"""Making and using join links: what is stored, what is refused, who a participant is."""

from __future__ import annotations

import hashlib

import pytest
from django.utils import timezone

from annotate import services as annotate_services
from annotate.models import Assignment
from crowd.errors import CrowdError, LinkRefused
from crowd.models import GuidelineExample, JoinLink, Participant
from crowd.services import (
    guideline_examples_set,
    join_link_close,
    participant_finish,
    participant_join,
)
from tests.annotate.gender import submit


def test_a_link_token_carries_256_random_bits_and_only_its_hash_is_stored(make_link):
    link, token = make_link()
    __, other = make_link()
    assert len(token) >= 43  # token_urlsafe(32): 32 random bytes, base64 without padding
    assert token != other
    assert link.token_digest == hashlib.sha256(token.encode()).hexdigest()
    stored = JoinLink.objects.filter(pk=link.pk).values().get()
    assert token not in {str(value) for value in stored.values()}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"quota": 0}, "quota must be at least 1"),
        ({"completion_url": "ftp://panel.example.org/done"}, r"is not an http\(s\) URL"),
        ({"completion_url": "javascript:alert(1)"}, r"is not an http\(s\) URL"),
        ({"completion_code": "  "}, "completion code must not be empty"),
        ({"panel_params": ["PROLIFIC PID"]}, "is not a query parameter name"),
        ({"max_participants": 0}, "max participants must be at least 1"),
        ({"expires_in": -60}, "is in the past"),
    ],
)
def test_bad_link_settings_are_refused_in_one_line_and_nothing_is_written(make_link, changes, message):
    with pytest.raises(CrowdError, match=message) as caught:
        make_link(**changes)
    assert "\n" not in str(caught.value)
    assert not JoinLink.objects.exists()


def test_first_visit_makes_a_passwordless_account_of_that_study_alone(make_link, study):
    link, _ = make_link()
    participant, created = participant_join(link=link, panel_id="5f0c0ffee")
    assert created
    user = participant.user
    assert not user.has_usable_password()
    assert not user.groups.exists()
    assert not user.is_staff
    assert list(user.annotated_studies.all()) == [study]
    assert participant.study == study
    assert participant.panel_id == "5f0c0ffee"


def test_the_same_panel_id_continues_as_the_same_participant_even_through_another_link(make_link):
    first_link, _ = make_link()
    second_link, _ = make_link()
    participant, _ = participant_join(link=first_link, panel_id="abc")
    again, created = participant_join(link=second_link, panel_id="abc")
    other, other_created = participant_join(link=first_link, panel_id="xyz")
    assert (again.pk, created) == (participant.pk, False)
    assert other_created
    assert other.user_id != participant.user_id


def test_a_closed_an_expired_or_a_full_link_takes_no_one_new(make_link):
    closed, _ = make_link()
    join_link_close(link=closed)
    with pytest.raises(LinkRefused, match="closed"):
        participant_join(link=closed, panel_id="a")
    expired, _ = make_link(expires_in=3600)
    JoinLink.objects.filter(pk=expired.pk).update(expires_at=timezone.now())
    expired.refresh_from_db()
    with pytest.raises(LinkRefused, match="expired"):
        participant_join(link=expired, panel_id="a")
    full, _ = make_link(max_participants=1)
    participant_join(link=full, panel_id="a")
    with pytest.raises(LinkRefused, match="full"):
        participant_join(link=full, panel_id="b")
    assert Participant.objects.count() == 1


def test_finishing_frees_the_seats_the_participant_still_holds(make_link, items, study):
    link, _ = make_link(quota=1)
    participant, _ = participant_join(link=link, panel_id="a")
    queue = annotate_services.assignment_queue(study=study, annotator=participant.user, size=2)
    submit(item=queue[0].item, annotator=participant.user, value="male")
    participant_finish(participant=participant)
    seats = Assignment.objects.filter(annotator=participant.user)
    assert [(seat.item_id, seat.completed_at is not None) for seat in seats] == [(queue[0].item_id, True)]
    assert participant.finished_at is not None


def test_guideline_examples_name_an_answer_and_an_item_and_a_wrong_one_writes_nothing(study, items):
    guideline_examples_set(
        study=study, examples=[("", "male", items[0].key), ("gender", "female", items[1].key)]
    )
    assert {(e.value, e.item_id) for e in GuidelineExample.objects.all()} == {
        ("male", items[0].pk),
        ("female", items[1].pk),
    }
    with pytest.raises(CrowdError, match=r"no item 'nope\.png'"):
        guideline_examples_set(study=study, examples=[("", "male", items[2].key), ("", "female", "nope.png")])
    with pytest.raises(CrowdError, match="'robot' is not an answer of gender"):
        guideline_examples_set(study=study, examples=[("", "robot", items[2].key)])
    assert GuidelineExample.objects.get(value="male").item_id == items[0].pk
