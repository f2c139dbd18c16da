from __future__ import annotations

from django.urls import path
from rest_framework.authtoken.views import obtain_auth_token

from annotate import api

urlpatterns = [
    path("token/", obtain_auth_token, name="api-token"),
    path("studies/", api.StudyListApi.as_view(), name="api-studies"),
    path("studies/<slug:slug>/next/", api.NextImageApi.as_view(), name="api-next-image"),
    path("images/", api.ImageListApi.as_view(), name="api-images"),
    path("images/<int:pk>/", api.ImageDetailApi.as_view(), name="api-image"),
    path("labels/", api.LabelListApi.as_view(), name="api-labels"),
    path("labels/<int:pk>/", api.LabelDetailApi.as_view(), name="api-label"),
    path("disputes/", api.DisputeListApi.as_view(), name="api-disputes"),
    path("disputes/<int:pk>/", api.DisputeDetailApi.as_view(), name="api-dispute"),
    path("disputes/<int:pk>/resolve/", api.DisputeResolveApi.as_view(), name="api-dispute-resolve"),
    path("agreement/", api.AgreementApi.as_view(), name="api-agreement"),
    path("ground-truth/", api.GroundTruthExportApi.as_view(), name="api-ground-truth"),
]
