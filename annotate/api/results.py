"""Agreement per question and the ground-truth export (researchers)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from annotate.agreement import agreement_report
from annotate.api.common import (
    BAD_STUDY_QUERY,
    RESEARCHERS_ONLY,
    UNKNOWN_STUDY,
    check_filters,
    query_with_study,
)
from annotate.serializers.results import (
    GROUND_TRUTH_CSV,
    GROUND_TRUTH_ROW_SCHEMA,
    AgreementOutput,
    AgreementQuery,
    ExportQuery,
)
from config.api import ResearcherApi, error_responses, invalid
from studies.selectors import study_questions


class AgreementApi(ResearcherApi):
    """Agreement on one question of ``?study=`` (``?question=``, default the first), optionally
    of one ``t2i_model`` / ``category``."""

    @extend_schema(
        operation_id="agreement_retrieve",
        tags=["agreement"],
        parameters=[AgreementQuery],
        responses={
            200: AgreementOutput,
            **error_responses(
                {
                    400: BAD_STUDY_QUERY + " Or a question the study does not ask (code unknown_question).",
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_STUDY,
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        params, study = query_with_study(request, AgreementQuery)
        check_filters(study=study, t2i_model=params.get("t2i_model"), category=params.get("category"))
        questions = study_questions(study)
        if not questions:
            raise invalid(f"The study {study.slug} has no questions.", code="no_questions")
        question = next((q for q in questions if q.key == params.get("question", questions[0].key)), None)
        if question is None:
            raise invalid(
                f"Unknown question '{params['question']}' (questions: {', '.join(q.key for q in questions)}).",
                code="unknown_question",
                field="question",
            )
        report = agreement_report(
            study=study,
            question=question,
            t2i_model=params.get("t2i_model") or None,
            category=params.get("category") or None,
        )
        return Response(AgreementOutput(report).data)


class CSVRenderer(BaseRenderer):
    """Lets DRF's ``?format=csv`` negotiation pick CSV; the view builds the bytes itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class GroundTruthExportApi(ResearcherApi):
    """Ground truth of a study, one row per (item, question): JSON rows, or a CSV download
    (``?format=csv`` or ``Accept: text/csv``). Errors are JSON either way."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(
        operation_id="ground_truth_retrieve",
        tags=["ground truth"],
        parameters=[ExportQuery],
        responses={
            (200, "application/json"): OpenApiResponse(
                {"type": "array", "items": GROUND_TRUTH_ROW_SCHEMA},
                description="One row per (item, question).",
            ),
            (200, "text/csv"): OpenApiResponse(GROUND_TRUTH_CSV, description="The same rows as a CSV file."),
            **error_responses(
                {
                    400: "?study= or ?format= is missing, empty, unknown or given twice.",
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_STUDY,
                }
            ),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        from annotate.exports import ground_truth_download, ground_truth_rows

        params, study = query_with_study(request, ExportQuery)
        # ?format=csv or "Accept: text/csv": the CSV file, never CSVRenderer's str() of the rows.
        wants_csv = getattr(request.accepted_renderer, "format", "") == "csv"
        if params.get("format") == "csv" or wants_csv:
            return ground_truth_download(study, "csv", "text/csv")
        return Response(ground_truth_rows(study=study))
