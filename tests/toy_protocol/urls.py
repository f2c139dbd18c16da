"""The toy protocol's page, mounted under ``/reports/`` in the ``reports`` namespace."""

from __future__ import annotations

from django.urls import path

from tests.toy_protocol import views

urlpatterns = [path("toy/counts/", views.counts, name="toy_counts")]
