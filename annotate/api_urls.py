"""URLs of the annotate API (``images/``: the old name of ``items/``; ids: ``config.api.IdConverter``)."""

from __future__ import annotations

from django.urls import path

from annotate.api.disputes import DisputeDetailApi, DisputeListApi, DisputeResolveApi
from annotate.api.items import ImageDetailApi, ImageListApi, ItemDetailApi, ItemListApi
from annotate.api.labeling import LabelDetailApi, LabelListApi, NextItemApi
from annotate.api.results import AgreementApi, GroundTruthExportApi
from annotate.api.studies import QuestionListApi, StudyListApi

urlpatterns = [
    path("studies/", StudyListApi.as_view(), name="api-studies"),
    path("studies/<slug:slug>/next/", NextItemApi.as_view(), name="api-next-item"),
    path("questions/", QuestionListApi.as_view(), name="api-questions"),
    path("items/", ItemListApi.as_view(), name="api-items"),
    path("items/<id:pk>/", ItemDetailApi.as_view(), name="api-item"),
    path("images/", ImageListApi.as_view(), name="api-images"),
    path("images/<id:pk>/", ImageDetailApi.as_view(), name="api-image"),
    path("labels/", LabelListApi.as_view(), name="api-labels"),
    path("labels/<id:pk>/", LabelDetailApi.as_view(), name="api-label"),
    path("disputes/", DisputeListApi.as_view(), name="api-disputes"),
    path("disputes/<id:pk>/", DisputeDetailApi.as_view(), name="api-dispute"),
    path("disputes/<id:pk>/resolve/", DisputeResolveApi.as_view(), name="api-dispute-resolve"),
    path("agreement/", AgreementApi.as_view(), name="api-agreement"),
    path("ground-truth/", GroundTruthExportApi.as_view(), name="api-ground-truth"),
]
