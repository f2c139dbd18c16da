"""Error pages in the site's layout: 400, 403 (saying who may see what), 404, 500, and a failed CSRF check."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.template import loader
from django.urls import Resolver404, reverse
from django.views import csrf, defaults

from config.api import API_PREFIX
from studies import permissions
from studies.models import Study

log = logging.getLogger(__name__)

#: At most this many studies are listed on an error page.
STUDIES_LISTED = 50
PLAIN = (
    "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title} · BiasLab</title></head>"
    "<body><h1>{title}</h1><p><a href='/'>Back to BiasLab</a></p></body></html>"
)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def _render(
    request: HttpRequest | None, template: str, status: int, title: str, context: dict[str, Any]
) -> HttpResponse:
    """``template`` in the layout: with ``request``'s context processors when given and they
    work, else without them (no user, no database), else plain HTML. Never raises."""
    context = {"status": status, "title": title, **context}
    if request is not None:
        try:
            return HttpResponse(loader.render_to_string(template, context, request=request), status=status)
        except Exception:
            log.exception("The %s page could not use the request context; rendering it without", status)
    try:
        return HttpResponse(loader.render_to_string(template, context), status=status)
    except Exception:
        log.exception("The %s page could not be rendered in the layout; answering plain HTML", status)
        return HttpResponse(PLAIN.format(title=title), status=status)


def _message(exception: Exception | None) -> str:
    """What the code said about the error (``PermissionDenied("Reports are for researchers.")``), when it
    is a sentence for the user: never the resolver's own 404, which lists the URL patterns tried."""
    if exception is None or isinstance(exception, Resolver404) or not exception.args:
        return ""
    message = exception.args[0]
    return message if isinstance(message, str) else ""


def _viewer(request: HttpRequest) -> dict[str, Any]:
    """Who is asking and in which roles, when that can be known without failing."""
    try:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return {"viewer": None}
        held = [
            name
            for name, check in (
                ("annotator", permissions.is_annotator),
                ("researcher", permissions.is_researcher),
                ("admin", permissions.is_admin),
            )
            if check(user)
        ]
        return {"viewer": user.get_username(), "viewer_roles": held}
    except Exception:
        log.exception("Could not tell who was refused")
        return {"viewer": None}


def _studies(request: HttpRequest) -> dict[str, Any]:
    """The studies the visitor may open, each with its link: a researcher's reports of every
    study, an annotator's labeling screen of each study they label. Empty when that cannot be
    known (no user yet, the database down)."""
    try:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return {"studies": []}
        if permissions.is_researcher(user):
            rows = Study.objects.order_by("name").values_list("name", "slug")[:STUDIES_LISTED]
            url = reverse("reports:overview") + "?study={}"
            return {"studies": [{"name": name, "url": url.format(slug)} for name, slug in rows]}
        rows = user.annotated_studies.order_by("name").values_list("name", "slug")[:STUDIES_LISTED]
        return {
            "studies": [
                {"name": name, "url": reverse("annotate:label_study", args=[slug])} for name, slug in rows
            ]
        }
    except Exception:
        log.exception("Could not list the studies of the visitor")
        return {"studies": []}


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400: a Host this server does not answer for (before any user is loaded), or a view's
    ``BadRequest`` with its reason (a report filter naming no study, model or detector)."""
    if _is_api(request):
        return defaults.bad_request(request, exception)
    context = {"message": _message(exception) if isinstance(exception, BadRequest) else ""}
    return _render(request, "errors/400.html", 400, "Bad request", context | _studies(request))


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """403: what the page said, who is asking, and which role may see what."""
    if _is_api(request):
        return defaults.permission_denied(request, exception)
    context = {"message": _message(exception), **_viewer(request)}
    return _render(request, "errors/403.html", 403, "Not allowed", context)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404, with the view's own explanation when it gave one."""
    if _is_api(request):
        return defaults.page_not_found(request, exception)
    context = {"message": _message(exception), **_studies(request)}
    return _render(request, "errors/404.html", 404, "Page not found", context)


def server_error(request: HttpRequest) -> HttpResponse:
    """500, rendered without the request context: no user, no session, no database."""
    if _is_api(request):
        return defaults.server_error(request)
    return _render(None, "errors/500.html", 500, "Something went wrong", {})


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """403 for a form whose CSRF check failed (a page left open across a new login, blocked
    cookies). In development and on the API, Django's own page with its diagnosis."""
    if (settings.DEBUG and not settings.BIASLAB_FRIENDLY_ERRORS) or _is_api(request):
        return csrf.csrf_failure(request, reason)
    return _render(request, "errors/csrf.html", 403, "Form expired", {})


class ErrorPagesMiddleware:
    """In development (DEBUG): a view's ``BadRequest`` gets the 400 page, and with BIASLAB_FRIENDLY_ERRORS a
    missing page gets the 404 page; server errors and API paths keep their own."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if (
            response.status_code == 404
            and getattr(request, "resolver_match", None) is None  # no URL pattern matched
            and self._friendly(request)
        ):
            return page_not_found(request, Resolver404())
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not settings.DEBUG or _is_api(request):
            return None
        if isinstance(exception, BadRequest):
            return bad_request(request, exception)
        if isinstance(exception, Http404) and self._friendly(request):
            return page_not_found(request, exception)
        return None

    @staticmethod
    def _friendly(request: HttpRequest) -> bool:
        return bool(settings.DEBUG and settings.BIASLAB_FRIENDLY_ERRORS and not _is_api(request))
