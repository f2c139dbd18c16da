"""The objects protocol's report pages, mounted under ``/reports/`` by its spec's ``urls``."""

from __future__ import annotations

from django.urls import path

from protocols.objects import views

urlpatterns = [
    # A COCO class's images with their boxes; <str:...> as a name may hold a space.
    path("objects/<str:name>/", views.class_detail, name="object_class"),
]
