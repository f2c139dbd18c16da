"""The researchers' dashboard under /reports/ (``?study=<slug>``, default the only study)."""

from __future__ import annotations

import sys
from importlib import reload
from typing import Any

from django.conf import settings
from django.urls import URLPattern, URLResolver, clear_url_caches, include, path

from reports import views
from studies.protocols import PROTOCOLS, protocols_changed

app_name = "reports"

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.overview, name="overview"),
    path("tables/<slug:name>.<slug:fmt>", views.table_download, name="table"),
    path("charts/<slug:name>.<slug:fmt>", views.chart_download, name="chart"),
    path("charts/view/<slug:name>.<slug:fmt>", views.chart_image, name="chart_image"),
]
# Each protocol brings its own pages (``ProtocolSpec.urls``, a dotted path: no import upward).
urlpatterns += [path("", include(PROTOCOLS[key].urls)) for key in PROTOCOLS if PROTOCOLS[key].urls]


def remount(**kwargs: Any) -> None:
    """Mount the protocols' pages anew when the registered protocols change."""
    for name in (__name__, settings.ROOT_URLCONF):
        if name in sys.modules:
            reload(sys.modules[name])
    clear_url_caches()


# Strongly held: a reload replaces the module's function, and the uid keeps the first one.
protocols_changed.connect(remount, weak=False, dispatch_uid="reports.urls.remount")
