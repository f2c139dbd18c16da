from __future__ import annotations

from django.urls import path

from detectors import api

urlpatterns = [
    path("predictions/", api.PredictionListApi.as_view(), name="api-predictions"),
    path("detector-runs/", api.RunListApi.as_view(), name="api-detector-runs"),
]
