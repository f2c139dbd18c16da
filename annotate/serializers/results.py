"""Agreement per question and the ground-truth export, with their queries."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from rest_framework import serializers

from annotate.exports import HEAD_COLUMNS, ITEM_COLUMNS, PAIR_COLUMNS
from annotate.serializers.studies import StudyQuery


class AgreementQuery(StudyQuery):
    question = serializers.SlugField(required=False, help_text="Question key (default: the study's first).")
    t2i_model = serializers.CharField(
        required=False, allow_blank=True, help_text="Only this T2I model (empty: all)."
    )
    category = serializers.CharField(
        required=False, allow_blank=True, help_text="Only prompts of this category (empty: all)."
    )


class ExportQuery(StudyQuery):
    format = serializers.ChoiceField(
        choices=["json", "csv"], required=False, help_text="csv: a file download; json (default): rows."
    )


class KappaFacetOutput(serializers.Serializer):
    cohen_kappa = serializers.FloatField(allow_null=True)
    observed_agreement = serializers.FloatField(allow_null=True)
    n_images = serializers.IntegerField()


class AnnotatorPairOutput(KappaFacetOutput):
    annotators = serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2)


class AgreementOutput(serializers.Serializer):
    """Agreement of the annotators on one question (figures are null where undefined)."""

    study = serializers.CharField()
    question = serializers.CharField()
    question_text = serializers.CharField()
    labels = serializers.ListField(
        child=serializers.CharField(), help_text="Answer values, in confusion order."
    )
    label_names = serializers.ListField(child=serializers.CharField())
    n_items = serializers.IntegerField(help_text="Items with two or more labels: the ones measured.")
    n_images = serializers.IntegerField(help_text="Old name of n_items.")
    n_labels = serializers.IntegerField()
    max_labels_per_item = serializers.IntegerField()
    max_labels_per_image = serializers.IntegerField(help_text="Old name of max_labels_per_item.")
    cohen_kappa = serializers.FloatField(allow_null=True)
    observed_agreement = serializers.FloatField(allow_null=True)
    expected_agreement = serializers.FloatField(allow_null=True)
    confusion = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="Rows: the first annotator's answers; columns: the second's; in labels order.",
    )
    per_t2i_model = serializers.DictField(child=KappaFacetOutput(), help_text="{T2I model: its agreement}")
    per_category = serializers.DictField(child=KappaFacetOutput(), help_text="{category: its agreement}")
    per_annotator_pair = AnnotatorPairOutput(many=True)
    fleiss_kappa = serializers.FloatField(allow_null=True)
    krippendorff_alpha = serializers.FloatField(allow_null=True)


#: One ground-truth row per (item, question): annotator_i / label_i / reason_i for each label.
GROUND_TRUTH_ROW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [*HEAD_COLUMNS, *ITEM_COLUMNS, "final_label"],
    "properties": {
        "item": {"type": "string", "description": "The item's key."},
        "question": {"type": "string"},
        "image": {"type": "string", "description": "The item's main image path as imported."},
        **{column: {"type": "string"} for column in (*PAIR_COLUMNS, *ITEM_COLUMNS) if column != "seed"},
        "seed": {"type": "integer", "format": "int64", "nullable": True},
        "final_label": {"type": "string", "description": "Empty until the answer is final."},
        "resolved_by": {"type": "string"},
        "note": {"type": "string"},
        "posterior": {
            "type": "number",
            "nullable": True,
            "description": "The truth-inference model's probability of the final answer; null otherwise.",
        },
    },
    "additionalProperties": {"type": "string", "description": "annotator_N, label_N, reason_N."},
}
GROUND_TRUTH_CSV = OpenApiTypes.STR
