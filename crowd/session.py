"""What the browser session remembers of a participant, so that the gate in front of every view
(``crowd.middleware``) decides without a query."""

from __future__ import annotations

from typing import Any, TypedDict

from crowd.models import Participant

SESSION_KEY = "crowd_participant"


class Marker(TypedDict):
    user: int
    participant: int
    study: int
    slug: str
    quota: int
    consented: bool
    finished: bool


def marker_set(request: Any, participant: Participant) -> Marker:
    """Remember ``participant`` (signed in on this request) in the session."""
    marker: Marker = {
        "user": participant.user_id,
        "participant": participant.pk,
        "study": participant.study_id,
        "slug": participant.study.slug,
        "quota": participant.link.quota,
        "consented": participant.consented_at is not None,
        "finished": participant.finished_at is not None,
    }
    request.session[SESSION_KEY] = marker
    return marker


def marker_of(request: Any) -> Marker | None:
    """The participant this session belongs to, if any (and only while its account is signed in)."""
    session = getattr(request, "session", None)
    marker: Marker | None = session.get(SESSION_KEY) if session is not None else None
    if marker is None or getattr(request.user, "pk", None) != marker["user"]:
        return None
    return marker


def marker_update(request: Any, **changes: Any) -> None:
    marker = request.session[SESSION_KEY]
    request.session[SESSION_KEY] = {**marker, **changes}
