from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.static import serve

from annotate import roles


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to the screen it works in."""
    if roles.is_researcher(request.user):
        return redirect("reports:overview")
    if roles.is_annotator(request.user):
        return redirect("annotate:label")
    return redirect("annotate:no_role")


def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"ok": True, "database": connection.vendor})


@login_required
def media(request: HttpRequest, path: str) -> HttpResponse:
    """Image files, for logged-in users only. Served by Django so the app runs stand-alone;
    file names are content hashes, so a URL reveals nothing about prompt or model. MEDIA_ROOT
    is read per request (tests and deployments may point it elsewhere after start-up)."""
    return serve(request, path, document_root=settings.MEDIA_ROOT)
