"""Deploy checks (``manage.py check --deploy``) for what the API's protection relies on."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def throttle_cache_is_shared(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """The API's rate limits need a cache every server process shares."""
    backend = settings.CACHES.get("default", {}).get("BACKEND", "")
    if backend.endswith("locmem.LocMemCache"):
        return [
            Warning(
                "The API rate limits count requests in a local-memory cache, separately in every "
                "server process.",
                hint="Set BIASLAB_CACHE_URL to a cache all processes share: redis://host:6379/0, "
                "or db://biaslab_cache after `manage.py createcachetable`. The login lockout "
                "is in the database and needs nothing.",
                id="accounts.W001",
            )
        ]
    return []
