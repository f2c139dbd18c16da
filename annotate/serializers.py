"""Explicit input and output serializers of the annotate API, one pair per action."""

from __future__ import annotations

from rest_framework import serializers

from annotate.models import Image, Label, Study


class StudyOutput(serializers.ModelSerializer):
    class Meta:
        model = Study
        fields = ["slug", "name", "description", "label_set", "labels_per_image", "show_prompt"]


class ImageOutput(serializers.ModelSerializer):
    """An image as researchers see it: where it came from, its state and final label."""

    study = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    prompt = serializers.CharField(source="prompt.text")
    category = serializers.CharField(source="prompt.category")
    word = serializers.CharField(source="prompt.word")
    url = serializers.CharField()
    state = serializers.CharField()
    n_labels = serializers.IntegerField()
    final_label = serializers.SerializerMethodField()

    class Meta:
        model = Image
        fields = [
            "id",
            "study",
            "source_path",
            "t2i_model",
            "prompt",
            "category",
            "word",
            "seed",
            "index",
            "params",
            "width",
            "height",
            "url",
            "state",
            "n_labels",
            "final_label",
        ]

    def get_final_label(self, image: Image) -> str | None:
        final = getattr(image, "final_label", None)
        return final.value if final is not None else None


class NextImageOutput(serializers.Serializer):
    """What an annotator needs to label one image — nothing about other annotators' labels,
    and the prompt only when the study shows it."""

    image = serializers.IntegerField(allow_null=True)
    url = serializers.CharField(required=False)
    width = serializers.IntegerField(required=False)
    height = serializers.IntegerField(required=False)
    prompt = serializers.CharField(allow_null=True, required=False)
    preload = serializers.ListField(child=serializers.CharField(), required=False)
    label_set = serializers.ListField(child=serializers.DictField(), required=False)
    done = serializers.IntegerField()
    remaining = serializers.IntegerField()


class LabelSubmitInput(serializers.Serializer):
    image = serializers.IntegerField(help_text="Id of the image being labelled.")
    value = serializers.CharField(max_length=50, help_text="One of the study's label values.")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    duration_ms = serializers.IntegerField(required=False, allow_null=True, min_value=0, default=None)
    request_id = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="Client token; a retried request with the same token is stored once.",
    )


class LabelChangeInput(serializers.Serializer):
    value = serializers.CharField(max_length=50)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class LabelOutput(serializers.ModelSerializer):
    annotator = serializers.CharField(source="annotator.username")
    study = serializers.CharField(source="image.study.slug")

    class Meta:
        model = Label
        fields = [
            "id",
            "image",
            "study",
            "annotator",
            "value",
            "reason",
            "duration_ms",
            "created_at",
            "updated_at",
        ]


class DisputeLabelOutput(serializers.Serializer):
    annotator = serializers.CharField()
    value = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)


class DisputeOutput(serializers.Serializer):
    image = serializers.IntegerField(source="id")
    source_path = serializers.CharField()
    t2i_model = serializers.CharField()
    prompt = serializers.CharField(source="prompt.text")
    url = serializers.CharField()
    state = serializers.CharField()
    labels = DisputeLabelOutput(many=True, source="labels_out")


class DisputeResolveInput(serializers.Serializer):
    value = serializers.CharField(
        max_length=50, required=False, help_text="Final label; omit with unresolvable=true."
    )
    unresolvable = serializers.BooleanField(
        default=False, help_text="The annotators cannot agree: use the study's fallback label (low quality)."
    )
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)

    def validate(self, attrs: dict) -> dict:
        if attrs.get("unresolvable") == bool(attrs.get("value")):
            raise serializers.ValidationError("Give exactly one of 'value' or 'unresolvable': true.")
        return attrs


class FinalLabelOutput(serializers.Serializer):
    image = serializers.IntegerField(source="image_id")
    value = serializers.CharField()
    source = serializers.CharField()
    decided_by = serializers.SerializerMethodField()
    note = serializers.CharField()
    decided_at = serializers.DateTimeField()

    def get_decided_by(self, final) -> str | None:
        return final.decided_by.username if final.decided_by_id else None


class AgreementQuery(serializers.Serializer):
    study = serializers.SlugField()
    t2i_model = serializers.CharField(required=False)
    category = serializers.CharField(required=False)


class ExportQuery(serializers.Serializer):
    study = serializers.SlugField()
    format = serializers.ChoiceField(choices=["json", "csv"], default="json")
