"""The questions protocol's report pages, mounted under ``/reports/questions/`` in the
``reports`` namespace (``reports.urls`` includes this module by its dotted path)."""

from __future__ import annotations

from django.urls import path

from protocols.questions import views

urlpatterns = [
    path("answer/", views.answer_images, name="question_answer"),
]
