from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from config.media import media_file_response
from studies import permissions


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to the screen it works in."""
    if permissions.is_researcher(request.user):
        return redirect("reports:overview")
    if permissions.is_annotator(request.user):
        return redirect("annotate:label")
    return redirect("annotate:no_role")


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True, "database": connection.vendor})


@login_required
def media(request: HttpRequest, path: str) -> HttpResponse | FileResponse:
    """Image files, for the users who may see them (``config.media``; others get 404). Served by
    Django so the app runs stand-alone; file names are content hashes, so a URL reveals nothing
    about prompt or model."""
    return media_file_response(request, path)
