"""Template tags of join links: a participant's quota on the labeling screen."""

from __future__ import annotations

from typing import Any

from django import template

from crowd.session import marker_of

register = template.Library()


@register.simple_tag(takes_context=True)
def participant_quota(context: dict[str, Any]) -> int | None:
    """The quota of the participant this request's session belongs to; None for anyone else.
    Read from the session marker the gate already loaded: no statement."""
    request = context.get("request")
    marker = marker_of(request) if request is not None else None
    return marker["quota"] if marker is not None else None
