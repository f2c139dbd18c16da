"""GET /api/participants/?study=: the participants of a study's join links, for researchers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from annotate import services as annotate_services
from crowd.models import Participant
from crowd.services import participant_finish, participant_join
from tests.annotate.gender import submit


def test_researchers_read_each_participant_with_panel_id_start_finish_items_and_time(
    api_for, researcher, make_link, items, study
):
    link, _ = make_link(quota=1)
    done, _ = participant_join(link=link, panel_id="pid-done")
    seat = annotate_services.assignment_queue(study=study, annotator=done.user, size=1)[0]
    submit(item=seat.item, annotator=done.user, value="male")
    participant_finish(participant=done)
    started = timezone.now() - timedelta(minutes=5)
    Participant.objects.filter(pk=done.pk).update(started_at=started)
    participant_join(link=link, panel_id="pid-new")
    response = api_for(researcher).get(f"/api/participants/?study={study.slug}")
    assert response.status_code == 200
    first, second = response.json()
    done.refresh_from_db()
    assert set(first) == {
        "panel_id",
        "username",
        "link",
        "started_at",
        "consented_at",
        "finished_at",
        "items",
        "seconds",
    }
    assert (first["panel_id"], first["link"], first["items"]) == ("pid-done", link.pk, 1)
    assert first["seconds"] == pytest.approx((done.finished_at - started).total_seconds(), abs=0.1)
    assert first["finished_at"] is not None
    assert (second["panel_id"], second["items"], second["seconds"], second["finished_at"]) == (
        "pid-new",
        0,
        None,
        None,
    )


def test_participants_are_for_researchers_only(api_for, annotator_a, outsider, study):
    for user in (annotator_a, outsider):
        assert api_for(user).get(f"/api/participants/?study={study.slug}").status_code == 403
    assert api_for(None).get(f"/api/participants/?study={study.slug}").status_code == 401


def test_a_missing_or_unknown_study_is_a_clear_error(api_for, researcher, study):
    client = api_for(researcher)
    assert client.get("/api/participants/").status_code == 400
    response = client.get("/api/participants/?study=nope")
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]
