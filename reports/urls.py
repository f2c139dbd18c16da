"""The researchers' dashboard under /reports/: each study's report, its analysis's pages,
and downloads. Every page takes ``?study=<slug>`` (default: the only study)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from reports import views
from studies.protocols import PROTOCOLS

app_name = "reports"

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.overview, name="overview"),
    path("tables/<slug:name>.<slug:fmt>", views.table_download, name="table"),
    path("charts/<slug:name>.<slug:fmt>", views.chart_download, name="chart"),
    path("charts/view/<slug:name>.<slug:fmt>", views.chart_image, name="chart_image"),
]
# Each protocol brings its own pages (``ProtocolSpec.urls``, a dotted path: no import upward),
# e.g. the gender analysis's heatmap and drill-downs, the objects analysis's class page.
urlpatterns += [path("", include(PROTOCOLS[key].urls)) for key in PROTOCOLS if PROTOCOLS[key].urls]
