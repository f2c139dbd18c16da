"""REST API of the model side, for researchers: predictions of image files (filterable by detector, version,
T2I model, study) and detector runs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import (
    QueryInput,
    ResearcherApi,
    StrictPageNumberPagination,
    error_responses,
    invalid,
)
from detectors import selectors
from detectors.kinds import kind_choices
from detectors.models import PredictionStatus, RunStatus
from studies.models import Study

RESEARCHERS_ONLY = "Not logged in, or not a researcher or admin."


class PredictionQuery(QueryInput):
    detector = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Only this detector (empty: all)."
    )
    version = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Only this detector version (empty: all)."
    )
    t2i_model = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Only files of this T2I model (empty: all)."
    )
    study = serializers.SlugField(required=False, help_text="Only files of this study's items.")


@extend_schema_field({"type": "object", "additionalProperties": True})
class FreeObjectField(serializers.JSONField):
    """A JSON object whose keys depend on the detector's output kind."""


class PredictionOutput(serializers.Serializer):
    """A prediction of an image file; ``image``, ``item``, ``study`` and ``t2i_model`` name the
    file's first item image in scope (``selectors.predictions_list``)."""

    id = serializers.IntegerField()
    image_id = serializers.IntegerField(help_text="The image file (studies.Image) predicted")
    image = serializers.CharField(source="source_path", help_text="source_path as imported")
    item = serializers.CharField(source="item_key", help_text="key of the item using the file")
    study = serializers.CharField(source="study_slug")
    t2i_model = serializers.CharField(source="item_t2i_model")
    detector = serializers.CharField()
    version = serializers.CharField()
    kind = serializers.ChoiceField(choices=kind_choices(), help_text="What the output holds.")
    status = serializers.ChoiceField(choices=PredictionStatus.choices)
    prediction = serializers.CharField(
        source="verdict", help_text="male, female, filtered for gender; empty if failed or another kind"
    )
    reason = serializers.CharField(source="filter_reason", help_text="Why filtered; empty otherwise")
    detail = serializers.SerializerMethodField()
    scores = FreeObjectField(help_text="Scores by label (gender, attributes); {} otherwise")
    output = FreeObjectField(help_text="The whole output, valid for its kind; {} if failed")
    error = serializers.CharField()
    seconds = serializers.FloatField(allow_null=True)
    run_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()

    def get_detail(self, prediction: Any) -> str:
        return selectors.prediction_detail(prediction)


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
    status = serializers.ChoiceField(choices=RunStatus.choices)
    n_total = serializers.IntegerField()
    n_done = serializers.IntegerField()
    n_failed = serializers.IntegerField()
    n_skipped = serializers.IntegerField()
    seconds = serializers.FloatField()
    images_per_second = serializers.FloatField(allow_null=True)
    requests = serializers.IntegerField(
        help_text="HTTP requests a judge behind an API sent, retries included."
    )
    cache_hits = serializers.IntegerField(help_text="Answers read from the response cache instead.")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField(
        allow_null=True, help_text="At the run's usd_per_1k_tokens; null without."
    )
    error = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class PredictionListApi(ResearcherApi):
    """Predictions of the image files in scope, by id (a file shared by several items once,
    named by its first item)."""

    pagination_class = StrictPageNumberPagination

    @extend_schema(
        operation_id="predictions_list",
        tags=["detectors"],
        parameters=[PredictionQuery],
        responses={
            200: PredictionOutput(many=True),
            **error_responses(
                {
                    400: "A parameter is given twice, ?page= is malformed, or ?study= names no study "
                    "(code unknown_filter).",
                    403: RESEARCHERS_ONLY,
                    404: "A page past the last one.",
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        params = PredictionQuery.parse(request)
        study = None
        if params.get("study"):
            study = Study.objects.filter(slug=params["study"]).first()
            if study is None:
                raise invalid(f"There is no study '{params['study']}'.", code="unknown_filter", field="study")
        predictions = selectors.predictions_list(
            detector=params["detector"], version=params["version"], t2i_model=params["t2i_model"], study=study
        )
        return self.paginated(predictions, lambda page: PredictionOutput(page, many=True).data)


class RunListApi(ResearcherApi):
    """The most recent detector runs (200 at most), newest first."""

    @extend_schema(
        operation_id="detector_runs_list",
        tags=["detectors"],
        responses={200: RunOutput(many=True), **error_responses({403: RESEARCHERS_ONLY})},
    )
    def get(self, request: Request) -> Response:
        return Response(RunOutput(selectors.runs_recent(), many=True).data)
