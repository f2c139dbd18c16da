"""REST API of the model side, for researchers: predictions (filterable) and detector runs.

One view per action with explicit serializers; annotators and outsiders get 403 for every verb.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate import roles
from annotate.models import Study
from detectors import selectors


class IsResearcher(BasePermission):
    message = "Only researchers and admins may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_researcher(request.user)


class PredictionQuery(serializers.Serializer):
    detector = serializers.CharField(required=False, allow_blank=True, default="")
    version = serializers.CharField(required=False, allow_blank=True, default="")
    t2i_model = serializers.CharField(required=False, allow_blank=True, default="")
    study = serializers.SlugRelatedField(
        slug_field="slug", queryset=Study.objects.all(), required=False, allow_null=True, default=None
    )


class PredictionOutput(serializers.Serializer):
    id = serializers.IntegerField()
    image_id = serializers.IntegerField()
    image = serializers.CharField(source="image.source_path", help_text="source_path as imported")
    study = serializers.CharField(source="image.study.slug")
    t2i_model = serializers.CharField(source="image.t2i_model")
    detector = serializers.CharField()
    version = serializers.CharField()
    status = serializers.CharField()
    prediction = serializers.CharField(source="verdict", help_text="male, female, filtered; empty if failed")
    reason = serializers.CharField(source="filter_reason")
    detail = serializers.CharField()
    scores = serializers.JSONField()
    error = serializers.CharField()
    seconds = serializers.FloatField(allow_null=True)
    run_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class RunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    detector = serializers.CharField()
    version = serializers.CharField()
    study = serializers.CharField(source="study.slug", allow_null=True, default=None)
    t2i_model = serializers.CharField()
    shard = serializers.CharField()
    device = serializers.CharField()
    batch_size = serializers.IntegerField()
    host = serializers.CharField()
    status = serializers.CharField()
    n_total = serializers.IntegerField()
    n_done = serializers.IntegerField()
    n_failed = serializers.IntegerField()
    n_skipped = serializers.IntegerField()
    seconds = serializers.FloatField()
    images_per_second = serializers.FloatField(allow_null=True)
    error = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class PredictionListApi(APIView):
    """GET ?detector=&version=&t2i_model=&study= → paginated predictions, by id."""

    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request) -> Response:
        query = PredictionQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        predictions = selectors.predictions_list(**query.validated_data)
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(predictions, request, view=self)
        return paginator.get_paginated_response(PredictionOutput(page, many=True).data)


class RunListApi(APIView):
    """GET → the most recent detector runs, newest first."""

    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request) -> Response:
        return Response(RunOutput(selectors.runs_recent(), many=True).data)
