"""Items as researchers see them, one item in detail, and the items list's query."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from annotate.models import FinalLabelSource, ItemState
from annotate.serializers.studies import FreeObjectField, StringMapField, StudyQuery, many_data
from studies.models import ImageRole, Item, Study
from studies.selectors import item_images, item_main_image, item_questions, study_questions


class ItemImageOutput(serializers.Serializer):
    role = serializers.ChoiceField(choices=ImageRole.choices)
    url = serializers.CharField(source="image.url", help_text="Where the file is served (a path).")
    width = serializers.IntegerField(source="image.width")
    height = serializers.IntegerField(source="image.height")
    source_path = serializers.CharField(help_text="The file's path as imported.")


def images_of(item: Item) -> list[dict[str, Any]]:
    """The item's images by role as JSON rows (uses a prefetch when there is one)."""
    return many_data(ItemImageOutput, list(item_images(item).values()))


def _of_main(item: Item, attribute: str) -> Any:
    main = item_main_image(item)
    return attrgetter(attribute)(main) if main else None


class ItemOutput(serializers.ModelSerializer):
    """An item as researchers see it: where it came from, its images, state and final answers.
    Needs ``items_with_state`` annotations and the item's images and final labels prefetched."""

    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    prompt = serializers.CharField(source="prompt.text", read_only=True, allow_null=True)
    category = serializers.CharField(source="prompt.category", read_only=True, allow_null=True)
    word = serializers.CharField(source="prompt.word", read_only=True, allow_null=True)
    source_path = serializers.SerializerMethodField()
    params = FreeObjectField(read_only=True)
    metadata = FreeObjectField(read_only=True)
    question_keys = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Keys of the questions this item asks; empty: every question of the study.",
    )
    images = serializers.SerializerMethodField(help_text="The item's images by role.")
    url = serializers.SerializerMethodField()
    width = serializers.SerializerMethodField()
    height = serializers.SerializerMethodField()
    state = serializers.ChoiceField(choices=ItemState.choices, read_only=True)
    n_labels = serializers.IntegerField(read_only=True)
    final_labels = serializers.SerializerMethodField()
    final_label = serializers.SerializerMethodField()

    class Meta:
        model = Item
        fields = [
            "id",
            "study",
            "key",
            "source_path",
            "t2i_model",
            "prompt",
            "category",
            "word",
            "seed",
            "index",
            "params",
            "metadata",
            "question_keys",
            "images",
            "url",
            "width",
            "height",
            "state",
            "n_labels",
            "final_labels",
            "final_label",
        ]
        read_only_fields = fields

    @extend_schema_field(ItemImageOutput(many=True))
    def get_images(self, item: Item) -> list[dict[str, Any]]:
        return images_of(item)

    def get_source_path(self, item: Item) -> str | None:
        return _of_main(item, "source_path")

    def get_url(self, item: Item) -> str | None:
        return _of_main(item, "image.url")

    def get_width(self, item: Item) -> int | None:
        return _of_main(item, "image.width")

    def get_height(self, item: Item) -> int | None:
        return _of_main(item, "image.height")

    def _finals(self, item: Item) -> dict[str, str]:
        by_id = {q.pk: q.key for q in study_questions(item.study)}
        return {by_id[f.question_id]: f.value for f in item.final_labels.all() if f.question_id in by_id}

    @extend_schema_field(StringMapField)
    def get_final_labels(self, item: Item) -> dict[str, str]:
        """Final answers by question key (questions without one are left out)."""
        return self._finals(item)

    def get_final_label(self, item: Item) -> str | None:
        """The final answer when the item asks one question (None otherwise, or when unset)."""
        asked = item_questions(item, study_questions(item.study))
        return self._finals(item).get(asked[0].key) if len(asked) == 1 else None


# --- Item detail (researchers) ------------------------------------------------------------------


class FinalAnswerOutput(serializers.Serializer):
    value = serializers.CharField(allow_blank=True)
    display = serializers.CharField(allow_blank=True)
    # Named like Field.source: DRF takes declared fields out of the class; the stubs cannot tell.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=FinalLabelSource.choices,
        help_text="Where the final answer came from. In a history entry with an empty value (the "
        "final answer was removed: an annotator's change broke the agreement), the source of the "
        "answer removed.",
    )
    decided_by = serializers.CharField(allow_null=True, help_text="Username; null for an import.")
    note = serializers.CharField(allow_blank=True)
    decided_at = serializers.DateTimeField()


class FinalRevisionOutput(FinalAnswerOutput):
    question = serializers.CharField()


class DisputeLabelOutput(serializers.Serializer):
    annotator = serializers.CharField()
    value = serializers.CharField()
    display = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)


class ItemLabelOutput(DisputeLabelOutput):
    duration_ms = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class LabelRevisionOutput(serializers.Serializer):
    question = serializers.CharField()
    annotator = serializers.CharField()
    value = serializers.CharField()
    display = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    changed_by = serializers.CharField()
    changed_at = serializers.DateTimeField()


class ItemQuestionOutput(serializers.Serializer):
    key = serializers.CharField(source="question.key")
    text = serializers.CharField(source="question.text")
    state = serializers.ChoiceField(choices=ItemState.choices)
    labels = ItemLabelOutput(many=True)
    final_label = FinalAnswerOutput(allow_null=True)


class ItemDetailOutput(ItemOutput):
    """An item with, per question it asks, every label, the final answer, and the history of
    both (oldest first)."""

    questions = ItemQuestionOutput(many=True, read_only=True, source="questions_detail")
    label_history = LabelRevisionOutput(many=True, read_only=True)
    final_label_history = FinalRevisionOutput(many=True, read_only=True)

    class Meta(ItemOutput.Meta):
        fields = [*ItemOutput.Meta.fields, "questions", "label_history", "final_label_history"]
        read_only_fields = fields


class ItemQuery(StudyQuery):
    t2i_model = serializers.CharField(
        required=False, allow_blank=True, help_text="Only this T2I model's items (empty: all)."
    )
    category = serializers.CharField(
        required=False, allow_blank=True, help_text="Only items of prompts of this category (empty: all)."
    )
    state = serializers.ChoiceField(
        choices=ItemState.choices,
        required=False,
        help_text="Only items in this state.",
        error_messages={
            "invalid_choice": f"Unknown state '{{input}}' (states: {', '.join(ItemState.values)})."
        },
    )
    q = serializers.CharField(
        required=False, allow_blank=True, help_text="Text in the item's key or its prompt (empty: all)."
    )
