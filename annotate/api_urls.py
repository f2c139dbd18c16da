"""URLs of the annotate API. ``images/`` is the one-image era's name of ``items/``: both serve
the same code, so scripts written against either keep working. Ids are ``<id:…>``
(``config.api.IdConverter``): a whole number from 1, anything else a JSON 404."""

from __future__ import annotations

from django.urls import path

from annotate import api

urlpatterns = [
    path("studies/", api.StudyListApi.as_view(), name="api-studies"),
    path("studies/<slug:slug>/next/", api.NextItemApi.as_view(), name="api-next-item"),
    path("questions/", api.QuestionListApi.as_view(), name="api-questions"),
    path("items/", api.ItemListApi.as_view(), name="api-items"),
    path("items/<id:pk>/", api.ItemDetailApi.as_view(), name="api-item"),
    path("images/", api.ImageListApi.as_view(), name="api-images"),
    path("images/<id:pk>/", api.ImageDetailApi.as_view(), name="api-image"),
    path("labels/", api.LabelListApi.as_view(), name="api-labels"),
    path("labels/<id:pk>/", api.LabelDetailApi.as_view(), name="api-label"),
    path("disputes/", api.DisputeListApi.as_view(), name="api-disputes"),
    path("disputes/<id:pk>/", api.DisputeDetailApi.as_view(), name="api-dispute"),
    path("disputes/<id:pk>/resolve/", api.DisputeResolveApi.as_view(), name="api-dispute-resolve"),
    path("agreement/", api.AgreementApi.as_view(), name="api-agreement"),
    path("ground-truth/", api.GroundTruthExportApi.as_view(), name="api-ground-truth"),
]
