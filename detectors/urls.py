from __future__ import annotations

from django.urls import path

from detectors import views

app_name = "detectors"
urlpatterns = [
    path("runs/", views.runs, name="runs"),
]
