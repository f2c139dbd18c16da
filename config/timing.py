"""``Server-Timing`` response header: how long the server spent on a request."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.db import connection
from django.http import HttpRequest, HttpResponse


class _DatabaseClock:
    """An execute wrapper that counts statements and adds up their time."""

    def __init__(self) -> None:
        self.statements = 0
        self.seconds = 0.0

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start
            self.statements += 1


class ServerTimingMiddleware:
    """Adds the ``Server-Timing`` header when ``BIASLAB_SERVER_TIMING`` is on."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        if not getattr(settings, "BIASLAB_SERVER_TIMING", False):
            raise MiddlewareNotUsed  # Django then leaves it out of the chain: zero cost
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        clock = _DatabaseClock()
        start, cpu = time.perf_counter(), time.thread_time()
        with connection.execute_wrapper(clock):
            response = self.get_response(request)
        wall_ms = (time.perf_counter() - start) * 1000
        cpu_ms = (time.thread_time() - cpu) * 1000
        response["Server-Timing"] = (
            f"app;dur={wall_ms:.2f}, cpu;dur={cpu_ms:.2f}, "
            f'db;dur={clock.seconds * 1000:.2f};desc="{clock.statements} statements"'
        )
        return response
