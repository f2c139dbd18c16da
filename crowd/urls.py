"""Participants' pages under /join/ (the link, its guidelines, the completion page) and the
researchers' page of a study's links under /crowd/."""

from __future__ import annotations

from django.urls import path

from crowd import views

app_name = "crowd"

urlpatterns = [
    path("join/guidelines/", views.guidelines, name="guidelines"),
    path("join/done/", views.done, name="done"),
    path("join/<str:token>/", views.join, name="join"),
    path("crowd/<slug:slug>/links/", views.links, name="links"),
    path("crowd/links/<int:link_id>/close/", views.link_close, name="link_close"),
]
