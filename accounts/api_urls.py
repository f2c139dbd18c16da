from __future__ import annotations

from django.urls import path

from accounts import api

urlpatterns = [
    path("token/", api.ApiTokenCreateApi.as_view(), name="api-token"),
]
