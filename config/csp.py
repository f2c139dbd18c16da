"""``Content-Security-Policy`` header on every response (Django 5.2 has no CSP of its own).

The default policy allows scripts, styles, fonts, images and requests from this site only: no
inline ``<script>`` or ``style="…"``, no ``eval``, no plugins, no framing. BiasLab's templates
are written for it — our own JavaScript and CSS are static files, htmx comes from django-htmx as
a static file and is told not to inject its indicator ``<style>`` nor to ``eval`` (the
``htmx-config`` meta in ``templates/base.html``), and the heatmap colours its cells from
``data-colour`` through the CSSOM (``static/reports/reports.js``), which the policy allows.
``data:`` images stay allowed for the admin's and DRF's icons. Django's admin needs nothing
more; DRF's browsable API inlines Pygments' stylesheet, which the policy refuses, so its JSON
is shown without syntax colours (nothing else changes; the API itself is unaffected).

Swagger UI and Redoc (``/api/schema/swagger/`` and ``/api/schema/redoc/``) cannot run under it:
both are React apps whose components write ``<style>`` elements and ``style="…"`` attributes,
and Redoc searches in a Web Worker started from a ``blob:`` URL. Those two pages alone get
``API_DOCS_POLICY`` (``with_policy``): inline styles and ``blob:`` workers, but still every
script, stylesheet and request from this site only — their files come from the installed
drf-spectacular-sidecar package, and Swagger UI's start-up script is a file of its own (not an
inline ``<script>``), so ``script-src`` stays ``'self'``.

``BIASLAB_CSP`` replaces the policy (``off`` sends none, on the API's pages too),
``BIASLAB_CSP_REPORT_ONLY=1`` sends it as ``Content-Security-Policy-Report-Only`` to try a
change without breaking pages. A response that already carries a policy keeps its own.
"""

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
# Swagger UI and Redoc only (see the module's docstring): DEFAULT_POLICY with inline styles and
# ``blob:`` workers, each of which one of them needs to render at all.
API_DOCS_POLICY: str = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
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
