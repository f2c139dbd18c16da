"""What the annotate API's serializers share: studies, questions, choices and the ``?study=`` query."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

from config.api import QueryInput, error_responses, not_found
from studies.models import Question, Study
from studies.selectors import study_questions


def many_data(serializer_class: type[serializers.BaseSerializer], rows: Any) -> list[dict[str, Any]]:
    """``serializer_class(rows, many=True).data``, typed as the list of rows it is."""
    return cast("list[dict[str, Any]]", serializer_class(rows, many=True).data)


class ChoiceOutput(serializers.Serializer):
    """One answer a question allows."""

    value = serializers.CharField(help_text="What is stored and sent as the answer, e.g. female.")
    name = serializers.CharField(required=False, help_text="What annotators read, e.g. Female.")
    key = serializers.CharField(required=False, help_text="Keyboard key that picks it on the screen.")
    requires_reason = serializers.BooleanField(required=False, help_text="The answer needs a reason.")
    clear = serializers.BooleanField(
        required=False, help_text="Counts as a clear image in the gender protocol's bias scores."
    )


@extend_schema_field({"type": "object", "additionalProperties": True})
class FreeObjectField(serializers.JSONField):
    """A JSON object whose keys depend on the study (generation settings, manifest columns)."""


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class StringMapField(serializers.DictField):
    """{question key: answer}."""


class QuestionOutput(serializers.ModelSerializer):
    """A question with its choices and keys."""

    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    choices = ChoiceOutput(many=True, read_only=True)

    class Meta:
        model = Question
        fields = [
            "study",
            "key",
            "text",
            "kind",
            "choices",
            "hotkey",
            "default_value",
            "unresolvable_value",
            "position",
        ]
        read_only_fields = fields


class StudyOutput(serializers.ModelSerializer):
    questions = serializers.SerializerMethodField()
    label_set = serializers.SerializerMethodField()
    labels_per_image = serializers.IntegerField(
        source="labels_per_item", read_only=True, help_text="Old name of labels_per_item."
    )

    class Meta:
        model = Study
        fields = [
            "slug",
            "name",
            "description",
            "protocol",
            "questions",
            "label_set",
            "labels_per_item",
            "labels_per_image",
            "agreement",
            "show_prompt",
        ]
        read_only_fields = fields

    @extend_schema_field(QuestionOutput(many=True))
    def get_questions(self, study: Study) -> list[dict[str, Any]]:
        return many_data(QuestionOutput, study_questions(study))

    @extend_schema_field(ChoiceOutput(many=True, allow_null=True))
    def get_label_set(self, study: Study) -> list[dict[str, Any]] | None:
        """The choices of the study's only question; None when it asks several."""
        questions = study_questions(study)
        return questions[0].choices if len(questions) == 1 else None


# --- Query parameters ---------------------------------------------------------------------------


class StudyQuery(QueryInput):
    study = serializers.SlugField(help_text="The study's slug (GET /api/studies/ lists them).")

    @classmethod
    def study_of(cls, request: Request) -> Study:
        """The study ``?study=`` names: 400 when missing, empty or repeated; 404 when there is none."""
        params = cls.parse(request)
        study = Study.objects.filter(slug=params["study"]).first()
        if study is None:
            raise not_found(f"There is no study '{params['study']}'.")
        return study


def study_list_schema(operation_id: str, tag: str, output: type[serializers.Serializer]) -> Any:
    """The schema of a researchers' list of ``output`` rows of the study ``?study=`` names."""
    return extend_schema(
        operation_id=operation_id,
        tags=[tag],
        parameters=[StudyQuery],
        responses={
            200: output(many=True),
            **error_responses(
                {
                    400: "?study= is missing, empty or given twice.",
                    403: "Not logged in, or not a researcher or admin.",
                    404: "No study with this slug.",
                }
            ),
        },
    )
