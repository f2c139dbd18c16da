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

``BIASLAB_CSP`` replaces the policy (``off`` sends none), ``BIASLAB_CSP_REPORT_ONLY=1`` sends it
as ``Content-Security-Policy-Report-Only`` to try a change without breaking pages. A response
that already carries a policy keeps its own.
"""

from __future__ import annotations

from collections.abc import Callable

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
ENFORCE = "Content-Security-Policy"
REPORT_ONLY = "Content-Security-Policy-Report-Only"


class ContentSecurityPolicyMiddleware:
    """Adds ``settings.BIASLAB_CSP`` to every response (read per request, so a test or a
    settings override takes effect at once); an empty policy adds nothing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = getattr(settings, "BIASLAB_CSP", DEFAULT_POLICY)
        if policy and ENFORCE not in response and REPORT_ONLY not in response:
            header = REPORT_ONLY if getattr(settings, "BIASLAB_CSP_REPORT_ONLY", False) else ENFORCE
            response[header] = policy
        return response
