"""Retry timing shared by the detectors that call a remote API (Face++, an OpenAI-compatible judge).

Exponential backoff with "equal jitter" between attempts, and the server's ``Retry-After`` read
as seconds or as an HTTP date. Pure: no Django, no network.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Delay before retry number ``attempt`` (1-based): exponential, capped, "equal jitter".

    Half of the exponential step is kept so retries never hammer the server, the other half is
    random so parallel workers spread out.
    """
    step = min(cap, base * 2 ** (attempt - 1))
    return step / 2 + rng.uniform(0, step / 2)


def retry_after_seconds(headers: Any, *, now: datetime | None = None) -> float | None:
    """The ``Retry-After`` header in seconds (a number or an HTTP date), None when absent or
    unreadable; never negative."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
