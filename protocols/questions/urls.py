"""The questions protocol's report pages under ``/reports/`` in the ``reports`` namespace
(``reports.urls`` mounts the URLconf its spec names, ``ProtocolSpec.urls``)."""

from __future__ import annotations

from django.urls import path

from protocols.questions import views

urlpatterns = [
    path("questions/answer/", views.answer_images, name="question_answer"),
]
