"""``Content-Security-Policy`` header on every response (Django 5.2 has no CSP of its own)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

DEFAULT_POLICY: str = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# Swagger UI and Redoc only (docs/how-to/deploy.md): DEFAULT_POLICY with inline styles and
# ``blob:`` workers, each of which one of them needs to render at all.
API_DOCS_POLICY: str = DEFAULT_POLICY.replace(
    "style-src 'self';", "style-src 'self' 'unsafe-inline';"
).replace("connect-src 'self';", "connect-src 'self'; worker-src 'self' blob:;")
ENFORCE = "Content-Security-Policy"
REPORT_ONLY = "Content-Security-Policy-Report-Only"


class ContentSecurityPolicyMiddleware:
    """Adds ``settings.BIASLAB_CSP`` to every response (read per request, so a test or a
    settings override takes effect at once); an empty policy adds nothing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        _add(response, getattr(settings, "BIASLAB_CSP", DEFAULT_POLICY))
        return response


def _add(response: HttpResponse, policy: str) -> None:
    if policy and ENFORCE not in response and REPORT_ONLY not in response:
        header = REPORT_ONLY if getattr(settings, "BIASLAB_CSP_REPORT_ONLY", False) else ENFORCE
        response[header] = policy


def with_policy(policy: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A view decorator: the view's responses carry ``policy`` instead of the site's, while the
    site sends one at all (``BIASLAB_CSP=off`` turns this off too; report-only is honoured)."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            response = view(request, *args, **kwargs)
            if getattr(settings, "BIASLAB_CSP", DEFAULT_POLICY):
                _add(response, policy)
            return response

        return wrapped

    return decorator
