"""The rate of new participant accounts per client address: BIASLAB_JOIN_THROTTLE. The same
machinery (cache, address, settings read per request) as the login throttle."""

from __future__ import annotations

import math
from typing import Any

from accounts.throttles import LoginRateThrottle


class JoinRateThrottle(LoginRateThrottle):
    scope = "join"


def join_throttle_wait(request: Any) -> int:
    """Count one new account from ``request``'s address; 0 when it may be made, else the seconds
    until one may."""
    throttle = JoinRateThrottle()
    if throttle.allow_request(request, None):  # type: ignore[arg-type]
        return 0
    return max(1, math.ceil(throttle.wait() or 1))
