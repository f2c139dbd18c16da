"""The researchers' dashboard under /reports/: each study's report, its analysis's pages,
and downloads. Every page takes ``?study=<slug>`` (default: the only study)."""

from __future__ import annotations

from django.urls import include, path

from reports import views
from reports.analyses.attributes import views as attributes_views
from reports.analyses.gender import views as gender_views
from reports.analyses.objects import views as objects_views
from reports.analyses.pair_change import views as pair_change_views

app_name = "reports"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("tables/<slug:name>.<slug:fmt>", views.table_download, name="table"),
    path("charts/<slug:name>.<slug:fmt>", views.chart_download, name="chart"),
    path("charts/view/<slug:name>.<slug:fmt>", views.chart_image, name="chart_image"),
    # The gender analysis's pages. A detector name may hold "/" (a hub id): <path:...> routes it.
    path("heatmap/", gender_views.heatmap, name="heatmap"),
    path("prompts/<int:prompt_id>/", gender_views.prompt_detail, name="prompt"),
    path("detectors/<path:detector>/", gender_views.detector_detail, name="detector"),
    # The attributes (GEP) analysis's page: an attribute's images in one setting.
    path("attributes/<slug:key>/<slug:setting>/", attributes_views.attribute_detail, name="attribute"),
    # The object co-occurrence analysis's page: a COCO class's images with their boxes
    # ("sports ball": a class name may hold a space, so <str:...>).
    path("objects/<str:name>/", objects_views.class_detail, name="object_class"),
    # The pair-change analysis's page: a word's pairs, both photos side by side ("taxi driver":
    # a word may hold a space, so <str:...>).
    path("pair-change/<str:domain>/<str:word>/", pair_change_views.word_detail, name="pair_word"),
    # Protocols in packages of their own bring their pages, by dotted path (no import upward).
    path("questions/", include("protocols.questions.urls")),
]
