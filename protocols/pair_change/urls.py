"""The pair-change protocol's report pages, mounted under ``/reports/`` by its spec's ``urls``."""

from __future__ import annotations

from django.urls import path

from protocols.pair_change import views

urlpatterns = [
    # A word's pairs side by side; <str:...> as a word may hold a space.
    path("pair-change/<str:domain>/<str:word>/", views.word_detail, name="pair_word"),
]
