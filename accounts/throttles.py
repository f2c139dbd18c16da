"""API rate limits whose rates are read from settings per request, and the client address."""

from __future__ import annotations

import math
from typing import Any, cast

from rest_framework import throttling
from rest_framework.settings import api_settings


class _RateFromSettings:
    scope: str | None  # as SimpleRateThrottle declares it

    def get_rate(self) -> str | None:
        # cast: the stubs type the rates as numbers; DRF's setting holds "<count>/<period>" or None.
        rates = cast("dict[str, str | None]", api_settings.DEFAULT_THROTTLE_RATES)
        return None if self.scope is None else rates.get(self.scope)


class AnonRateThrottle(_RateFromSettings, throttling.AnonRateThrottle):
    """Anonymous requests, per client address: BIASLAB_API_THROTTLE_ANON."""


class UserRateThrottle(_RateFromSettings, throttling.UserRateThrottle):
    """Authenticated requests, per user: BIASLAB_API_THROTTLE_USER."""


class LoginRateThrottle(_RateFromSettings, throttling.SimpleRateThrottle):
    """Password checks on the token API and the login page, per client address."""

    scope = "login"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def throttle_wait(throttle: throttling.SimpleRateThrottle, request: Any) -> int:
    """Count one request against ``throttle``; 0, or the seconds to wait."""
    # No DRF view here; these throttles key on the address alone and never read the view.
    if throttle.allow_request(request, None):  # type: ignore[arg-type]
        return 0
    return max(1, math.ceil(throttle.wait() or 1))


def client_address(request: Any) -> str:
    """The client's address as the throttles see it (BIASLAB_NUM_PROXIES)."""
    return throttling.BaseThrottle().get_ident(request)
