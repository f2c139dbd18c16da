from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils.cache import patch_cache_control
from django.views.static import serve

from studies import permissions
from studies.imaging import browser_file
from studies.models import Image

# images/<sha[:2]>/<sha>.<ext>: the names studies.ingest stores originals under.
_IMAGE_NAME_RE = re.compile(r"images/(?P<prefix>[0-9a-f]{2})/(?P<sha>[0-9a-f]{64})\.[A-Za-z0-9]{1,5}")


def media_file_visible(user: Any, storage_name: str) -> bool:
    """True when ``user`` may fetch ``storage_name`` (a path under MEDIA_ROOT), whether or not it exists
    (the rule: docs/explanation/web-side.md, "Media files")."""
    if permissions.is_researcher(user):
        return True
    match = _IMAGE_NAME_RE.fullmatch(storage_name)
    if match is None or match["prefix"] != match["sha"][:2]:
        return False
    # sha256 is unique: one index probe, then the file's items and their studies' members.
    return Image.objects.filter(
        sha256=match["sha"], file=storage_name, item_images__item__study__annotators=user
    ).exists()


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
    """Image files, for the users who may see them (``media_file_visible``; others get 404, as for a
    missing file), read from MEDIA_ROOT as it is now."""
    if not media_file_visible(request.user, path):
        raise Http404("No such file.")
    response = serve(request, browser_file(settings.MEDIA_ROOT, path), document_root=str(settings.MEDIA_ROOT))
    # Per-user permission: shared caches must not keep a copy for the next person.
    patch_cache_control(response, private=True)
    return response
