"""Studies and their questions: researchers, and annotators of the study."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from annotate.api.common import NO_ROLE, query_with_study, require_role, studies_visible_to
from annotate.serializers.studies import QuestionOutput, StudyOutput, StudyQuery
from config.api import ApiView, error_responses
from studies.selectors import study_questions


class StudyListApi(ApiView):
    """Researchers: every study; annotators: the studies they label. Each with its questions."""

    @extend_schema(
        operation_id="studies_list",
        tags=["studies"],
        responses={200: StudyOutput(many=True), **error_responses({403: NO_ROLE})},
    )
    def get(self, request: Request) -> Response:
        require_role(request.user)
        return Response(StudyOutput(studies_visible_to(request.user), many=True).data)


class QuestionListApi(ApiView):
    """The questions of ``?study=`` with their choices and keys: researchers, and annotators of
    that study."""

    @extend_schema(
        operation_id="questions_list",
        tags=["studies"],
        parameters=[StudyQuery],
        responses={
            200: QuestionOutput(many=True),
            **error_responses(
                {
                    400: "?study= is missing, empty or given twice.",
                    403: NO_ROLE,
                    404: "No study with this slug that you may see (annotators: only their studies).",
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        require_role(request.user)
        _params, study = query_with_study(request, StudyQuery)
        return Response(QuestionOutput(study_questions(study), many=True).data)
