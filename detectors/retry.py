"""Retries shared by the detectors that call a remote API (Face++, an OpenAI-compatible judge)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

T = TypeVar("T")


class Retryable(Exception):
    """One attempt failed in a way that another attempt may fix (the server's wait, if it named one)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    """Every attempt failed; the message is the last attempt's."""


def with_retries(
    attempt: Callable[[], T],
    *,
    max_attempts: int,
    base: float,
    cap: float,
    rng: random.Random,
    sleep: Callable[[float], None],
    retry_after_cap: float | None = None,
) -> T:
    """``attempt()`` until it returns, at most ``max_attempts`` times, waiting the backoff (or the
    server's ``Retry-After``, at most ``retry_after_cap``, when longer) after each Retryable."""
    last = ""
    for number in range(1, max_attempts + 1):
        try:
            return attempt()
        except Retryable as exc:
            last = str(exc)
            if number == max_attempts:
                break
            delay = backoff_delay(number, base=base, cap=cap, rng=rng)
            if exc.retry_after is not None:
                wait = exc.retry_after if retry_after_cap is None else min(exc.retry_after, retry_after_cap)
                delay = max(delay, wait)
            sleep(delay)
    raise RetriesExhausted(last)


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Delay before retry number ``attempt`` (1-based): exponential, capped, "equal jitter"."""
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
