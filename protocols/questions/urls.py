"""The questions protocol's report pages, mounted under ``/reports/`` by its spec's ``urls``."""

from __future__ import annotations

from django.urls import path

from protocols.questions import views

urlpatterns = [
    path("questions/answer/", views.answer_images, name="question_answer"),
]
