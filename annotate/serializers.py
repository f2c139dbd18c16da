"""Explicit input and output serializers of the annotate API, one set per action.

The labelled unit is an *item* (one image, or a seed/edit pair); a label is one annotator's
answer to one question about one item. Keys of the one-image era that still make sense are kept
beside the new ones (``image`` = the item id, ``url``/``width``/``height`` = the item's main
image, ``label_set`` = the choices of a single-question study, ``final_label`` = the final
answer of a single-question item), so scripts written against them keep working.

Every response goes through its output serializer, so the OpenAPI schema drf-spectacular builds
from these classes is the shape clients get. Inputs are ``config.api.StrictInput`` (JSON types
exactly, unknown fields refused) and ``config.api.QueryInput`` (query parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request

from annotate.models import FinalLabel, FinalLabelSource, ItemState, Label
from config.api import (
    QueryInput,
    StrictBooleanField,
    StrictCharField,
    StrictInput,
    StrictIntegerField,
    StrictSlugField,
    error_responses,
    not_found,
)
from studies.models import ImageRole, Item, ItemImage, Question, QuestionKind, Study
from studies.selectors import item_images, item_main_image, item_questions, study_questions

#: Labelling time is stored in a 32-bit column; a longer "duration" is a client bug.
MAX_DURATION_MS = 2**31 - 1


# --- Shared pieces ------------------------------------------------------------------------------


def many_data(serializer_class: type[serializers.BaseSerializer], rows: Any) -> list[dict[str, Any]]:
    """``serializer_class(rows, many=True).data``: a list of JSON rows. (With ``many=True`` DRF
    builds a ListSerializer, whose data is a list; the stubs type the call as one serializer.)"""
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
    kind = serializers.ChoiceField(choices=QuestionKind.choices, read_only=True)

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


class ItemImageOutput(serializers.Serializer):
    role = serializers.ChoiceField(choices=ImageRole.choices)
    url = serializers.CharField(source="image.url", help_text="Where the file is served (a path).")
    width = serializers.IntegerField(source="image.width")
    height = serializers.IntegerField(source="image.height")
    source_path = serializers.CharField(help_text="The file's path as imported.")


def images_of(item: Item) -> list[dict[str, Any]]:
    """The item's images by role as JSON rows (uses a prefetch when there is one)."""
    return many_data(ItemImageOutput, list(item_images(item).values()))


def _main(item: Item) -> ItemImage | None:
    return item_main_image(item)


class ItemOutput(serializers.ModelSerializer):
    """An item as researchers see it: where it came from, its images, state and final answers.
    Needs ``items_with_state`` annotations and the item's images and final labels prefetched."""

    study: serializers.SlugRelatedField[Study] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    prompt = serializers.SerializerMethodField()
    category = serializers.SerializerMethodField()
    word = serializers.SerializerMethodField()
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

    def get_prompt(self, item: Item) -> str | None:
        return item.prompt.text if item.prompt else None

    @extend_schema_field(ItemImageOutput(many=True))
    def get_images(self, item: Item) -> list[dict[str, Any]]:
        return images_of(item)

    def get_category(self, item: Item) -> str | None:
        return item.prompt.category if item.prompt else None

    def get_word(self, item: Item) -> str | None:
        return item.prompt.word if item.prompt else None

    def get_source_path(self, item: Item) -> str | None:
        main = _main(item)
        return main.source_path if main else None

    def get_url(self, item: Item) -> str | None:
        main = _main(item)
        return main.image.url if main else None

    def get_width(self, item: Item) -> int | None:
        main = _main(item)
        return main.image.width if main else None

    def get_height(self, item: Item) -> int | None:
        main = _main(item)
        return main.image.height if main else None

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
    # A field named like Field.source: DRF's serializer metaclass takes declared fields out of the
    # class, so nothing is shadowed at run time; the stubs cannot express that.
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


class ItemLabelOutput(serializers.Serializer):
    annotator = serializers.CharField()
    value = serializers.CharField()
    display = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
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
    key = serializers.CharField()
    text = serializers.CharField()
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


# --- Labeling (annotators) ----------------------------------------------------------------------


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


_ITEM_HELP = "Id of the item being labelled (item.id of GET /api/studies/{slug}/next/)."
_DURATION_HELP = "Milliseconds the annotator spent on the item (optional)."
_REQUEST_ID_HELP = "Client token; a retried request with the same token is stored once."


class _SubmitCommon(StrictInput):
    item = StrictIntegerField(min_value=1, max_value=2**63 - 1, help_text=_ITEM_HELP)
    duration_ms = StrictIntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_DURATION_MS,
        default=None,
        help_text=_DURATION_HELP,
    )
    request_id = StrictCharField(
        required=False, allow_blank=True, default="", max_length=64, help_text=_REQUEST_ID_HELP
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # 'image' is the old name of 'item': still read for old scripts, left out of the schema
        # (which names one way to say a thing). Both at once would silently drop one: refused.
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


# --- Disputes (researchers) ---------------------------------------------------------------------


class DisputeLabelOutput(serializers.Serializer):
    annotator = serializers.CharField()
    value = serializers.CharField()
    display = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)


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
    question = serializers.CharField()
    question_text = serializers.CharField()
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
    # A field named like Field.source: DRF's serializer metaclass takes declared fields out of the
    # class, so nothing is shadowed at run time; the stubs cannot express that.
    source = serializers.ChoiceField(choices=FinalLabelSource.choices)  # type: ignore[assignment]
    decided_by = serializers.SerializerMethodField()
    note = serializers.CharField(allow_blank=True)
    decided_at = serializers.DateTimeField()

    def get_display(self, final: FinalLabel) -> str:
        return final.question.display(final.value)

    def get_decided_by(self, final: FinalLabel) -> str | None:
        return final.decided_by.username if final.decided_by is not None else None


# --- Query parameters ---------------------------------------------------------------------------


class StudyQuery(QueryInput):
    study = serializers.SlugField(help_text="The study's slug (GET /api/studies/ lists them).")

    @classmethod
    def study_of(cls, request: Request) -> Study:
        """The study ``?study=`` names: a 400 when it is missing, empty or given twice; a 404
        when there is none."""
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


# --- Agreement and ground truth -----------------------------------------------------------------


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


#: One ground-truth row per (item, question). The annotator columns repeat for each of the N
#: labels (annotator_1, label_1, reason_1, annotator_2, …); pair studies add input_image and
#: output_image. Missing values are "" (seed: null).
GROUND_TRUTH_ROW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "item",
        "question",
        "image",
        "t2i_model",
        "category",
        "word",
        "prompt",
        "seed",
        "final_label",
    ],
    "properties": {
        "item": {"type": "string", "description": "The item's key."},
        "question": {"type": "string"},
        "image": {"type": "string", "description": "The item's main image path as imported."},
        "input_image": {"type": "string"},
        "output_image": {"type": "string"},
        "t2i_model": {"type": "string"},
        "category": {"type": "string"},
        "word": {"type": "string"},
        "prompt": {"type": "string"},
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
