"""URLs of the estimates API (``estimates.api``)."""

from __future__ import annotations

from django.urls import path

from estimates import api

urlpatterns = [
    path("sampling-rounds/", api.SamplingRoundListApi.as_view(), name="api-sampling-rounds"),
    path("estimates/", api.EstimateApi.as_view(), name="api-estimates"),
    path("estimates/jobs/<int:job_id>/", api.EstimateJobApi.as_view(), name="api-estimate-job"),
]
