"""REST API of quality control: the reliability figures of every annotator of a study."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from annotate.serializers.studies import StudyQuery, study_list_schema
from config.api import ResearcherApi
from quality.selectors import reliability_report, reliability_row


class KappaOutput(serializers.Serializer):
    annotator = serializers.CharField(help_text="The other annotator.")
    kappa = serializers.FloatField(allow_null=True, help_text="Cohen's kappa; null when undefined.")
    n = serializers.IntegerField(help_text="Shared (item, question)s.")


class AnnotatorReliabilityOutput(serializers.Serializer):
    annotator = serializers.CharField()
    labels = serializers.IntegerField(help_text="Items labelled.")
    median_seconds = serializers.FloatField(allow_null=True, help_text="Median seconds per label.")
    gold_answers = serializers.IntegerField(help_text="Gold answers given.")
    gold_correct = serializers.IntegerField(help_text="Gold answers right.")
    gold_accuracy = serializers.FloatField(allow_null=True)
    gold_low = serializers.FloatField(allow_null=True, help_text="95 % Wilson interval, low end.")
    gold_high = serializers.FloatField(allow_null=True, help_text="95 % Wilson interval, high end.")
    flagged = serializers.BooleanField(
        help_text="The study's rule flags them, by gold accuracy or by reliability (and not excluded)."
    )
    mean_kappa = serializers.FloatField(allow_null=True, help_text="Mean Cohen's kappa with the others.")
    agreement_with_final = serializers.FloatField(allow_null=True)
    answers_with_final = serializers.IntegerField()
    reliability = serializers.FloatField(allow_null=True, help_text="From truth inference, when it ran.")
    excluded = serializers.BooleanField()
    flag_reason = serializers.CharField(
        help_text='Why they are flagged: "gold", "reliability", "gold+reliability"; "" when not.'
    )
    kappas = KappaOutput(many=True, help_text="Cohen's kappa with every annotator sharing items.")


class AnnotatorListApi(ResearcherApi):
    """Every annotator of ``?study=`` with their reliability figures (the reliability page's)."""

    @study_list_schema("annotators_list", "annotators", AnnotatorReliabilityOutput)
    def get(self, request: Request) -> Response:
        report = reliability_report(study=StudyQuery.study_of(request))
        rows: list[dict[str, Any]] = []
        for row in report.rows:
            kappas = [
                {"annotator": b if a == row.username else a, "kappa": k.kappa, "n": k.n}
                for (a, b), k in report.kappas.items()
                if row.username in (a, b)
            ]
            rows.append(reliability_row(row) | {"kappas": kappas})
        return Response(AnnotatorReliabilityOutput(rows, many=True).data)
