"""Settings of the benchmark servers: the project's settings plus the Server-Timing header.

    DJANGO_SETTINGS_MODULE=bench.settings_bench

Everything else (DATABASE_URL, BIASLAB_MEDIA_ROOT, DJANGO_DEBUG …) comes from the environment
as in config/settings.py. Only the header is added: the server under test is the real one.
"""

from __future__ import annotations

from config.settings import *  # noqa: F403
from config.settings import MIDDLEWARE

BIASLAB_SERVER_TIMING = True
# First, so its figure covers every other middleware (session, auth, CSRF) too.
MIDDLEWARE = ["config.timing.ServerTimingMiddleware", *MIDDLEWARE]
