"""Types every app shares, so that mypy (with django-stubs) checks the code as it runs.

- ``UserLike``: whoever a permission check may be asked about — a signed-in account or the
  anonymous visitor (``request.user``). Code that records who acted (services, selectors that
  filter on a foreign key) takes ``django.contrib.auth.models.User``, the model every foreign key
  points to; views narrow ``request.user`` to it (``studies.permissions``' checks do).
- ``HtmxHttpRequest``: a request that went through django-htmx's middleware (every request does,
  see ``config/settings.py``), so ``request.htmx`` exists. django-htmx's documentation gives this
  class for exactly this purpose.
- ``AuthenticatedHttpRequest``: the request of a view that only signed-in users reach (a guard
  that sends anonymous visitors to the login page runs first), so ``request.user`` is a ``User``
  (django-stubs' documented pattern).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User
    from django_htmx.middleware import HtmxDetails

UserLike: TypeAlias = "User | AnonymousUser"


class HtmxHttpRequest(HttpRequest):
    """``HttpRequest`` with the ``htmx`` attribute django-htmx's middleware sets (a type only:
    views annotate their request with it; Django never instantiates it)."""

    htmx: HtmxDetails


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """``HtmxHttpRequest`` whose user is signed in (a type only, like ``HtmxHttpRequest``)."""

    user: User
