"""REST API of join links: the participants of a study, for researchers."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from annotate.serializers.studies import StudyQuery, study_list_schema
from config.api import ResearcherApi
from crowd.selectors import participant_rows


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


class ParticipantListApi(ResearcherApi):
    """Every participant of ``?study=``'s join links, in order of arrival."""

    @study_list_schema("participants_list", "participants", ParticipantOutput)
    def get(self, request: Request) -> Response:
        study = StudyQuery.study_of(request)
        return Response(ParticipantOutput(participant_rows(study=study), many=True).data)
