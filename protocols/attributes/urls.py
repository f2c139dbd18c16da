"""The attributes (GEP) protocol's report pages, mounted under ``/reports/`` by its spec's ``urls``."""

from __future__ import annotations

from django.urls import path

from protocols.attributes import views

urlpatterns = [
    # An attribute's images in one setting.
    path("attributes/<slug:key>/<slug:setting>/", views.attribute_detail, name="attribute"),
]
