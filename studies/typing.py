"""Types every app shares for mypy: ``UserLike`` (an account or the anonymous visitor),
``HtmxHttpRequest`` (``request.htmx`` set by django-htmx's middleware) and
``AuthenticatedHttpRequest`` (a view only signed-in users reach)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User
    from django_htmx.middleware import HtmxDetails

UserLike: TypeAlias = "User | AnonymousUser"


class HtmxHttpRequest(HttpRequest):
    """``HttpRequest`` with the ``htmx`` attribute django-htmx's middleware sets (a type only)."""

    htmx: HtmxDetails


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """``HtmxHttpRequest`` whose user is signed in (a type only, like ``HtmxHttpRequest``)."""

    user: User
