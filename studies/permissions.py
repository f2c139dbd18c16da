"""The three roles of BiasLab (annotator, researcher, admin: ``is_staff``) and the gates every
page and API puts before its views (``guarded``, ``researcher_only``, ``IsResearcher``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeGuard

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django_htmx.http import HttpResponseClientRedirect
from rest_framework.permissions import BasePermission

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from rest_framework.request import Request

    from studies.typing import UserLike

ANNOTATOR = "annotator"
RESEARCHER = "researcher"
ROLE_GROUPS = (ANNOTATOR, RESEARCHER)


# The checks are TypeGuards: after a True answer ``user`` is a ``User``.


def _groups(user: UserLike) -> set[str]:
    if not getattr(user, "is_authenticated", False):
        return set()
    cached: set[str] | None = getattr(user, "_biaslab_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        # A per-request cache on the user object, an attribute the model does not declare.
        setattr(user, "_biaslab_groups", cached)  # noqa: B010
    return cached


def is_admin(user: UserLike) -> TypeGuard[User]:
    """True for a signed-in staff member or superuser."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


def is_researcher(user: UserLike) -> TypeGuard[User]:
    """True for researchers and admins (admins may do everything a researcher may)."""
    return is_admin(user) or RESEARCHER in _groups(user)


def is_annotator(user: UserLike) -> TypeGuard[User]:
    """True for members of the annotator group (the group alone: not admins by default)."""
    return ANNOTATOR in _groups(user)


View = Callable[..., HttpResponse]
#: A gate's check: the request and the view's URL arguments → may this user go on?
Check = Callable[..., bool]


def guarded(*, methods: tuple[str, ...], check: Check, message: str = "") -> Callable[[View], View]:
    """Login, then the role ``check``, then the HTTP method, in that order: a wrong persona gets 403
    for every verb. Anonymous users go to the login page (htmx: ``HX-Redirect``)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                htmx = getattr(request, "htmx", None)
                if htmx:
                    page = htmx.current_url_abs_path or request.get_full_path()
                    return HttpResponseClientRedirect(redirect_to_login(page).url)
                return redirect_to_login(request.get_full_path())
            if not check(request, **kwargs):
                raise PermissionDenied(message) if message else PermissionDenied
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def researcher_only(
    *, methods: tuple[str, ...] = ("GET", "HEAD"), message: str = ""
) -> Callable[[View], View]:
    """The gate of researchers' pages: ``guarded`` with the researcher check."""
    return guarded(methods=methods, check=lambda request, **_: is_researcher(request.user), message=message)


class IsResearcher(BasePermission):
    """The DRF gate of researchers' endpoints (admins pass too)."""

    message = "Only researchers and admins may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_researcher(request.user)
