"""REST API of join links: the participants of a study, for researchers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from annotate.serializers import StudyQuery
from config.api import ApiView, error_responses, not_found
from crowd.selectors import participant_rows
from studies.models import Study
from studies.permissions import IsResearcher


class ParticipantOutput(serializers.Serializer):
    panel_id = serializers.CharField(help_text="The panel's participant id (e.g. their PROLIFIC_PID).")
    username = serializers.CharField(help_text="The account the join link made for them.")
    link = serializers.IntegerField(help_text="Id of the join link they came through.")
    started_at = serializers.DateTimeField(help_text="Their first visit.")
    consented_at = serializers.DateTimeField(allow_null=True, help_text="When they agreed to the guidelines.")
    finished_at = serializers.DateTimeField(
        allow_null=True, help_text="When they reached the quota; null before."
    )
    items = serializers.IntegerField(help_text="Items they labelled in the study.")
    seconds = serializers.FloatField(
        allow_null=True,
        help_text="Seconds from the first visit to the finish (before it: to the latest label).",
    )


class ParticipantListApi(ApiView):
    """Every participant of ``?study=``'s join links, in order of arrival."""

    permission_classes = [IsAuthenticated, IsResearcher]

    @extend_schema(
        operation_id="participants_list",
        tags=["participants"],
        parameters=[StudyQuery],
        responses={
            200: ParticipantOutput(many=True),
            **error_responses(
                {
                    400: "?study= is missing, empty or given twice.",
                    403: "Not logged in, or not a researcher or admin.",
                    404: "No study with this slug.",
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        params = StudyQuery.parse(request)
        study = Study.objects.filter(slug=params["study"]).first()
        if study is None:
            raise not_found(f"There is no study '{params['study']}'.")
        return Response(ParticipantOutput(participant_rows(study=study), many=True).data)
