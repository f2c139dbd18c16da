from __future__ import annotations

from django.urls import path

from crowd import api

urlpatterns = [path("participants/", api.ParticipantListApi.as_view(), name="api-participants")]
