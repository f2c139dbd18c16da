"""The researchers' dashboard under /reports/: pages, drill-downs and downloads."""

from __future__ import annotations

from django.urls import path

from reports import views

app_name = "reports"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("heatmap/", views.heatmap, name="heatmap"),
    path("prompts/<int:prompt_id>/", views.prompt_detail, name="prompt"),
    path("detectors/<str:detector>/", views.detector_detail, name="detector"),
    path("tables/<slug:name>.<slug:fmt>", views.table_download, name="table"),
    path("charts/<slug:name>.<slug:fmt>", views.chart_download, name="chart"),
    path("charts/view/<slug:name>.<slug:fmt>", views.chart_image, name="chart_image"),
]
