"""Labels written as an annotator on a given slot would give them, for the quality tests."""

from __future__ import annotations

from annotate import services
from annotate.models import Assignment


def labelled(items, annotator, value, slot):
    """``annotator`` answers ``value`` on each of ``items`` from a seat in ``slot``."""
    for item in items:
        Assignment.objects.create(
            item=item,
            annotator=annotator,
            slot=slot,
            claimed_at="2026-01-01T00:00Z",
            expires_at="2026-01-01T01:00Z",
        )
        services.annotation_submit(item=item, annotator=annotator, answers={"gender": value})
