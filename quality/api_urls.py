"""URLs of the quality-control API."""

from __future__ import annotations

from django.urls import path

from quality import api

urlpatterns = [
    path("annotators/", api.AnnotatorListApi.as_view(), name="api-annotators"),
]
