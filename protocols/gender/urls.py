"""The gender protocol's report pages, mounted under ``/reports/`` by its spec's ``urls``."""

from __future__ import annotations

from django.urls import path

from protocols.gender import views

urlpatterns = [
    # A detector name may hold "/" (a hub id): <path:...> routes it.
    path("heatmap/", views.heatmap, name="heatmap"),
    path("prompts/<int:prompt_id>/", views.prompt_detail, name="prompt"),
    path("detectors/<path:detector>/", views.detector_detail, name="detector"),
]
