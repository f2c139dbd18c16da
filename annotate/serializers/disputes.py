"""Disputes per (item, question) and the researcher's final answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from annotate.models import FinalLabel, FinalLabelSource, ItemState
from annotate.serializers.items import DisputeLabelOutput, FinalAnswerOutput, ItemImageOutput
from config.api import StrictBooleanField, StrictCharField, StrictInput, StrictSlugField


class _ItemSummaryOutput(serializers.Serializer):
    item = serializers.IntegerField(help_text="The item's id.")
    image = serializers.IntegerField(help_text="Old name of 'item'.")
    key = serializers.CharField()
    source_path = serializers.CharField(allow_null=True)
    t2i_model = serializers.CharField(allow_blank=True)
    prompt = serializers.CharField(allow_null=True)
    url = serializers.CharField(allow_null=True, help_text="The item's main image.")
    images = ItemImageOutput(many=True)


class DisputeRowOutput(_ItemSummaryOutput):
    """One disputed (item, question) with the labels that disagree and who gave them."""

    question = serializers.CharField()
    question_text = serializers.CharField()
    state = serializers.ChoiceField(choices=ItemState.choices)
    labels = DisputeLabelOutput(many=True)
    n_labels = serializers.IntegerField()
    n_needed = serializers.IntegerField()


class DisputeQuestionOutput(serializers.Serializer):
    question = serializers.CharField(source="question.key")
    question_text = serializers.CharField(source="question.text")
    state = serializers.ChoiceField(choices=ItemState.choices)
    labels = DisputeLabelOutput(many=True)
    final_label = FinalAnswerOutput(allow_null=True)


class DisputeDetailOutput(_ItemSummaryOutput):
    """One item's answers per question; ``question`` and ``labels`` at the top level only for
    an item that asks one question."""

    state = serializers.ChoiceField(choices=ItemState.choices)
    questions = DisputeQuestionOutput(many=True)
    question = serializers.CharField(required=False)
    labels = DisputeLabelOutput(many=True, required=False)


class _ResolveCommon(StrictInput):
    question = StrictSlugField(
        required=False,
        max_length=50,
        help_text="Question key; may be left out when the item asks one question.",
    )
    note = StrictCharField(required=False, allow_blank=True, default="", max_length=5000)


@extend_schema_field({"type": "boolean", "enum": [False]})
class FalseField(StrictBooleanField):
    """false, or left out."""


@extend_schema_field({"type": "boolean", "enum": [True]})
class TrueField(StrictBooleanField):
    """true, and nothing else."""

    default_error_messages = {"not_true": "Must be true (send 'value' to set an answer)."}

    def to_internal_value(self, data: Any) -> bool:
        value = super().to_internal_value(data)
        if value is not True:
            self.fail("not_true")
        return value


class ResolveValueInput(_ResolveCommon):
    """Set the final answer to one of the question's choice values."""

    value = StrictCharField(min_length=1, max_length=1000, help_text="The final answer.")
    unresolvable = FalseField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("unresolvable"):
            raise serializers.ValidationError(
                {"unresolvable": ["Give 'value' or 'unresolvable': true, not both."]}
            )
        return attrs


class ResolveUnresolvableInput(_ResolveCommon):
    """The annotators cannot agree and nobody can tell: the question's answer for that (the
    gender study: low quality)."""

    unresolvable = TrueField()


class FinalLabelOutput(serializers.Serializer):
    item = serializers.IntegerField(source="item_id")
    image = serializers.IntegerField(source="item_id", help_text="Old name of 'item'.")
    question = serializers.CharField(source="question.key")
    value = serializers.CharField()
    display = serializers.SerializerMethodField()
    # Named like Field.source: DRF takes declared fields out of the class; the stubs cannot tell.
    source = serializers.ChoiceField(choices=FinalLabelSource.choices)  # type: ignore[assignment]
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, allow_null=True)
    note = serializers.CharField(allow_blank=True)
    decided_at = serializers.DateTimeField()

    def get_display(self, final: FinalLabel) -> str:
        return final.question.display(final.value)
