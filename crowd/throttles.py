"""The rate of new participant accounts per client address: BIASLAB_JOIN_THROTTLE. The same
machinery (cache, address, settings read per request) as the login throttle."""

from __future__ import annotations

from typing import Any

from accounts.throttles import LoginRateThrottle, throttle_wait


class JoinRateThrottle(LoginRateThrottle):
    scope = "join"


def join_throttle_wait(request: Any) -> int:
    """Count one new account from ``request``'s address (``accounts.throttles.throttle_wait``)."""
    return throttle_wait(JoinRateThrottle(), request)
