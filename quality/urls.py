"""Pages of quality control (researchers)."""

from __future__ import annotations

from django.urls import path

from quality import views

app_name = "quality"

urlpatterns = [
    path("<slug:slug>/reliability/", views.reliability, name="reliability"),
    path("<slug:slug>/reliability/exclusion/", views.exclusion, name="exclusion"),
    path("items/<int:item_id>/gold/", views.gold_mark, name="gold_mark"),
]
