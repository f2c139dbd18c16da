"""The gate in front of every view for a participant's session: only their study's labeling
screen, join pages and images (else 403); after each saved key press, the quota checked."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from annotate.selectors import progress_counted_up_to
from crowd.models import Participant
from crowd.selectors import items_done
from crowd.services import participant_finish
from crowd.session import SESSION_KEY, Marker, marker_of, marker_update

LABELING = frozenset({"annotate:label_study", "annotate:label_submit", "annotate:label_undo"})
PARTICIPANT_PAGES = frozenset({"crowd:join", "crowd:guidelines", "crowd:done", "media", "logout"})
TO_LABELING = frozenset({"home", "annotate:label"})
REFUSED = "A study participant may only use the study's labeling screen."


class ParticipantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        joined = marker_of(request)
        # A participant's work left is counted up to their quota, not to the lab's thousand.
        with progress_counted_up_to(joined["quota"]) if joined else nullcontext():
            response = self.get_response(request)
        marker: Marker | None = getattr(request, "_crowd_labeling", None)
        if marker is None or response.status_code not in (200, 302):
            return response
        match = request.resolver_match
        submitted = (
            match is not None and match.view_name == "annotate:label_submit" and request.method == "POST"
        )
        done = items_done(user_id=marker["user"], study_id=marker["study"]) if submitted else None
        if done is not None and done >= marker["quota"]:
            participant = Participant.objects.get(pk=marker["participant"])
            participant_finish(participant=participant)
            marker_update(request, finished=True)
            return _go(request, reverse("crowd:done"))
        if response.status_code == 200 and getattr(request, "labeling_done", False):
            return _go(request, reverse("crowd:done"))  # no item left for them: the study ran out
        if done is not None and response.status_code == 200 and getattr(request, "htmx", False):
            # The quota line sits outside the swapped region: htmx updates it out of band.
            line = render_to_string(
                "crowd/_quota_line.html", {"done": done, "quota": marker["quota"], "oob": True}
            )
            response.content = response.content + line.encode(response.charset)
        return response

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        if request.resolver_match is None or SESSION_KEY not in getattr(request, "session", {}):
            return None
        marker = marker_of(request)
        if marker is None:
            return None
        name = request.resolver_match.view_name
        if name in PARTICIPANT_PAGES:
            return None
        if name in TO_LABELING:
            return redirect("annotate:label_study", slug=marker["slug"])
        if name not in LABELING or kwargs.get("slug") != marker["slug"]:
            raise PermissionDenied(REFUSED)
        if marker["finished"]:
            return _go(request, reverse("crowd:done"))
        if not marker["consented"]:
            return _go(request, reverse("crowd:guidelines"))
        request._crowd_labeling = marker  # type: ignore[attr-defined]
        return None


def _go(request: HttpRequest, url: str) -> HttpResponse:
    """A redirect that htmx follows too (``HX-Redirect`` on the labeling screen's requests)."""
    if getattr(request, "htmx", False):
        return HttpResponseClientRedirect(url)
    return redirect(url)
