"""The annotators' side: the next item, submitting and changing answers, their labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from annotate.models import Label
from annotate.serializers.items import ItemImageOutput, images_of
from annotate.serializers.studies import ChoiceOutput, QuestionOutput, many_data
from config.api import QueryInput, StrictCharField, StrictInput, StrictIntegerField, StrictSlugField
from studies.models import Item
from studies.selectors import item_questions, study_questions

#: Labelling time is stored in a 32-bit column; a longer "duration" is a client bug.
MAX_DURATION_MS = 2**31 - 1


class QueueItemOutput(serializers.Serializer):
    """An item as an annotator gets it: images by role and the questions it asks — never other
    annotators' labels, and the prompt only when the study shows it."""

    id = serializers.IntegerField(source="pk")
    key = serializers.CharField()
    prompt = serializers.SerializerMethodField()
    images = serializers.SerializerMethodField()
    questions = serializers.SerializerMethodField()

    def get_prompt(self, item: Item) -> str | None:
        # Hidden by default: the prompt could prime the annotator (study setting).
        return item.prompt.text if item.study.show_prompt and item.prompt else None

    @extend_schema_field(ItemImageOutput(many=True))
    def get_images(self, item: Item) -> list[dict[str, Any]]:
        return images_of(item)

    @extend_schema_field(QuestionOutput(many=True))
    def get_questions(self, item: Item) -> list[dict[str, Any]]:
        return many_data(QuestionOutput, item_questions(item, study_questions(item.study)))


@extend_schema_serializer(
    examples=[
        OpenApiExample(
            "Work to do",
            value={
                "item": {
                    "id": 17,
                    "key": "sdxl/img_00017.png",
                    "prompt": None,
                    "images": [
                        {
                            "role": "image",
                            "url": "/media/images/ab/abcd.png",
                            "width": 512,
                            "height": 512,
                            "source_path": "sdxl/img_00017.png",
                        }
                    ],
                    "questions": [
                        {
                            "study": "demo",
                            "key": "gender",
                            "text": "Which gender does the person in the image present?",
                            "kind": "choice",
                            "choices": [
                                {"value": "male", "name": "Male", "key": "m", "clear": True},
                                {"value": "female", "name": "Female", "key": "f", "clear": True},
                            ],
                            "hotkey": "",
                            "default_value": "",
                            "unresolvable_value": "low_quality",
                            "position": 0,
                        }
                    ],
                },
                "queue": [],
                "preload": [],
                "done": 3,
                "remaining": 18,
                "image": 17,
                "url": "/media/images/ab/abcd.png",
                "width": 512,
                "height": 512,
                "prompt": None,
                "label_set": [{"value": "male", "name": "Male", "key": "m", "clear": True}],
            },
            response_only=True,
        )
    ]
)
class NextItemOutput(serializers.Serializer):
    """The annotator's current item, the next ones to preload, and their progress. ``item`` is
    null when there is no work left. The one-image era's keys stand beside them."""

    item = QueueItemOutput(allow_null=True, help_text="The item to label now; null when all is done.")
    queue = QueueItemOutput(many=True, help_text="The items after it, already reserved.")
    preload = serializers.ListField(child=serializers.CharField(), help_text="Image URLs to fetch ahead.")
    done = serializers.IntegerField(help_text="Items you have labelled in this study.")
    remaining = serializers.IntegerField(
        help_text="Items still open to you: your open seats plus the items you could claim, "
        "those counted up to 1,000 (a larger number is given as 1,000)."
    )
    image = serializers.IntegerField(allow_null=True, help_text="Old name of item.id.")
    url = serializers.CharField(allow_null=True, help_text="The current item's main image.")
    width = serializers.IntegerField(allow_null=True)
    height = serializers.IntegerField(allow_null=True)
    prompt = serializers.CharField(allow_null=True, help_text="Only when the study shows prompts.")
    label_set = ChoiceOutput(
        many=True, allow_null=True, help_text="The choices when the item asks one question, else null."
    )


class _SubmitCommon(StrictInput):
    item = StrictIntegerField(
        min_value=1,
        max_value=2**63 - 1,
        help_text="Id of the item being labelled (item.id of GET /api/studies/{slug}/next/).",
    )
    duration_ms = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_DURATION_MS,
        default=None,
        help_text="Milliseconds the annotator spent on the item (optional).",
    )
    request_id = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="Client token; a retried request with the same token is stored once.",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # 'image', the old name of 'item', is still read (not in the schema); both at once is refused.
        if isinstance(data, Mapping) and "image" in data:
            if "item" in data:
                raise serializers.ValidationError({"image": ["Old name of 'item': give one of them."]})
            data = {("item" if key == "image" else key): value for key, value in data.items()}
        return super().to_internal_value(data)


class LabelAnswerInput(_SubmitCommon):
    """One answer: to the item's only question (``question`` may be left out), or to one
    question of an item whose other questions are toggles with a default. An item that asks
    several questions takes them all at once (``LabelAnswers``)."""

    question = StrictSlugField(
        required=False,
        max_length=50,
        help_text="Question key; may be left out when the item asks one question.",
    )
    value = StrictCharField(max_length=1000, help_text="One of the question's choice values.")
    reason = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="Why (needed by some answers).",
    )


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "string", "maxLength": 1000}, "minProperties": 1}
)
class AnswersField(serializers.DictField):
    """{question key: value}, at least one."""


class LabelAnswersInput(_SubmitCommon):
    """Every answer of an item at once ({question key: value}); toggle questions may be left out
    (they take their default)."""

    answers = AnswersField(
        child=StrictCharField(allow_blank=True, max_length=1000),
        allow_empty=False,
        help_text="{question key: value} for the item's questions (toggles may be left out).",
    )
    reasons = serializers.DictField(
        child=StrictCharField(allow_blank=True, max_length=2000),
        required=False,
        default=dict,
        help_text="{question key: reason} for the answers that need one.",
    )


class LabelChangeInput(StrictInput):
    """The new answer of a label you gave (its history is kept)."""

    value = StrictCharField(max_length=1000, help_text="One of the question's choice values.")
    reason = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="Kept only with an answer that asks for a reason (gender: other); any other "
        "answer is stored without one.",
    )


class LabelOutput(serializers.ModelSerializer):
    annotator = serializers.CharField(source="annotator.username")
    study = serializers.CharField(source="item.study.slug")
    question = serializers.CharField(source="question.key")
    image = serializers.IntegerField(source="item_id", help_text="Old name of 'item'.")
    display = serializers.SerializerMethodField()

    class Meta:
        model = Label
        fields = [
            "id",
            "item",
            "image",
            "question",
            "study",
            "annotator",
            "value",
            "display",
            "reason",
            "duration_ms",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_display(self, label: Label) -> str:
        return label.question.display(label.value)


class LabelQuery(QueryInput):
    study = serializers.SlugField(required=False, help_text="Only the labels of this study.")
    item = serializers.IntegerField(
        required=False, min_value=1, max_value=2**63 - 1, help_text="Only the labels of this item."
    )
    question = serializers.SlugField(required=False, help_text="Only the answers to this question key.")
