"""Labeling (annotators): the next item, submitting answers, reading and changing one's labels."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from annotate import errors, selectors, services
from annotate.api.common import NO_ROLE, IsAnnotator, question_of, raise_for, require_role, visible_study
from annotate.models import Label
from annotate.serializers.items import images_of
from annotate.serializers.labeling import (
    LabelAnswerInput,
    LabelAnswersInput,
    LabelChangeInput,
    LabelOutput,
    LabelQuery,
    NextItemOutput,
    QueueItemOutput,
)
from config.api import (
    ApiView,
    AuthenticatedRequest,
    StrictPageNumberPagination,
    error_responses,
    invalid,
    not_found,
)
from studies import permissions
from studies.models import Item
from studies.selectors import item_main_image, item_questions, study_questions


class NextItemApi(ApiView):
    """The annotator's current item (and the ones to preload), reserving seats as needed."""

    permission_classes = [IsAuthenticated, IsAnnotator]

    @extend_schema(
        operation_id="next_item",
        tags=["labeling"],
        parameters=[
            OpenApiParameter(
                "slug",
                str,
                OpenApiParameter.PATH,
                pattern=r"^[-a-zA-Z0-9_]+$",
                description="The study's slug.",
            )
        ],
        responses={
            200: NextItemOutput,
            **error_responses(
                {
                    403: "Not logged in, or not an annotator.",
                    404: "No study with this slug that you label.",
                }
            ),
        },
    )
    def get(self, request: AuthenticatedRequest, slug: str) -> Response:
        study = visible_study(request.user, slug)
        try:
            queue = services.assignment_queue(study=study, annotator=request.user)
        except errors.AnnotateError as exc:
            raise_for(exc)
        progress = selectors.annotator_progress(study=study, annotator=request.user)
        items = [seat.item for seat in queue]
        current = items[0] if items else None
        main = item_main_image(current) if current else None
        questions = item_questions(current, study_questions(study)) if current else []
        payload = {
            "item": current,
            "queue": items[1:],
            "preload": [row["url"] for item in items[1:] for row in images_of(item)],
            "done": progress.done,
            "remaining": progress.remaining,
            # The one-image era's keys: the item id, its main image, the single question's choices.
            "image": current.pk if current else None,
            "url": main.image.url if main else None,
            "width": main.image.width if main else None,
            "height": main.image.height if main else None,
            "prompt": QueueItemOutput().get_prompt(current) if current else None,
            "label_set": questions[0].choices if len(questions) == 1 else None,
        }
        return Response(NextItemOutput(payload).data)


def _labels_visible_to(user: Any) -> QuerySet[Label]:
    labels = Label.objects.select_related("annotator", "item__study", "question").order_by("id")
    if permissions.is_researcher(user):
        return labels
    return labels.filter(annotator=user)


LABEL_SUBMIT = PolymorphicProxySerializer(
    component_name="LabelSubmit",
    serializers=[LabelAnswerInput, LabelAnswersInput],
    resource_type_field_name=None,
)
LABEL_SUBMITTED = OpenApiResponse(
    {
        "oneOf": [
            {"$ref": "#/components/schemas/Label"},
            {"type": "array", "items": {"$ref": "#/components/schemas/Label"}},
        ]
    },
    description="Stored (or already stored by the same request): the label for one answer, "
    "the list of labels for `answers`.",
)


class LabelListApi(ApiView):
    """GET: your labels (researchers: everyone's). POST: answer an item you hold a seat on — one
    answer, or every answer of a multi-question item."""

    pagination_class = StrictPageNumberPagination

    @extend_schema(
        operation_id="labels_list",
        tags=["labeling"],
        parameters=[LabelQuery],
        responses={
            200: LabelOutput(many=True),
            **error_responses({400: "A filter or ?page= is empty, malformed or given twice.", 403: NO_ROLE}),
        },
    )
    def get(self, request: Request) -> Response:
        require_role(request.user)
        params = LabelQuery.parse(request)
        labels = _labels_visible_to(request.user)
        lookups = {"study": "item__study__slug", "item": "item_id", "question": "question__key"}
        labels = labels.filter(
            **{lookup: params[name] for name, lookup in lookups.items() if params.get(name)}
        )
        return self.paginated(labels, lambda page: LabelOutput(page, many=True).data)

    @extend_schema(
        operation_id="labels_create",
        tags=["labeling"],
        request=LABEL_SUBMIT,
        examples=[
            OpenApiExample(
                "One answer",
                value={
                    "item": 17,
                    "question": "gender",
                    "value": "female",
                    "duration_ms": 850,
                    "request_id": "a1",
                },
                request_only=True,
            ),
            OpenApiExample(
                "An answer that needs a reason",
                value={"item": 17, "value": "other", "reason": "a doll"},
                request_only=True,
            ),
            OpenApiExample(
                "Every answer of a pair",
                value={"item": 23, "answers": {"age": "older", "gender": "male_female", "skin": "same"}},
                request_only=True,
            ),
        ],
        responses={
            201: LABEL_SUBMITTED,
            **error_responses(
                {
                    400: "Invalid body, or an answer the question does not allow, a question the "
                    "item does not ask (code unknown_question, naming the field: question, "
                    "answers.<key> or reasons.<key>), a missing answer or reason (codes "
                    "invalid_answer, question_required).",
                    403: "Not logged in, not an annotator, or the seat on the item expired.",
                    404: "The item is not one of the items assigned to you.",
                    409: "Already labelled with another answer (change it with PUT), or its "
                    "final answer was already set by a researcher.",
                }
            ),
        },
    )
    def post(self, request: Request) -> Response:
        if not permissions.is_annotator(request.user):
            raise PermissionDenied("Only annotators submit labels.")
        several = isinstance(request.data, dict) and "answers" in request.data
        data = (LabelAnswersInput if several else LabelAnswerInput)(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        item_id = body["item"]
        # Items the annotator holds no seat on do not exist for them (404, whatever the reason).
        item = (
            Item.objects.select_related("study")
            .filter(assignments__annotator=request.user, pk=item_id)
            .first()
        )
        # A gold item (an attention check the labeling screen served) is answered there only.
        if item is None or (item.queue == 0 and item.gold_answers.exists()):
            raise not_found(f"Item {item_id} is not one of the items assigned to you.")
        if several:
            answers, reasons = dict(body["answers"]), dict(body["reasons"])
        else:
            question = question_of(item, body.get("question"))
            answers = {question.key: body["value"]}
            reasons = {question.key: body["reason"]} if body["reason"] else {}
        try:
            labels = services.annotation_submit(
                item=item,
                annotator=request.user,
                answers=answers,
                reasons=reasons,
                duration_ms=body["duration_ms"],
                request_id=body["request_id"],
            )
        except Item.DoesNotExist as exc:  # removed (remove_items) while the request waited for its lock
            raise not_found(f"Item {item_id} was removed.") from exc
        except errors.UnknownQuestion as exc:
            # The same code as for an unknown 'question', naming the field that holds it.
            raise invalid(str(exc), code="unknown_question", field=f"{exc.where}.{exc.key}") from exc
        except errors.AnnotateError as exc:
            raise_for(exc)
        labels = list(_labels_visible_to(request.user).filter(pk__in=[label.pk for label in labels]))
        if several:
            return Response(LabelOutput(labels, many=True).data, status=status.HTTP_201_CREATED)
        label = next(label for label in labels if label.question.key == question.key)
        return Response(LabelOutput(label).data, status=status.HTTP_201_CREATED)


_CHANGE_ERRORS = error_responses(
    {
        400: "Invalid body, or an answer the question does not allow (code invalid_answer).",
        403: "Not logged in, not the annotator who gave the label, or no longer an annotator of its study.",
        404: "No label with this id that you may see (an annotator sees only their own).",
        409: "The final answer was already set by a researcher: labels can no longer change.",
    }
)


class LabelDetailApi(ApiView):
    """One label. Someone else's label does not exist for an annotator (404). PUT and PATCH
    change the answer; the annotator's other answers on the item stay as they are. Labels are
    never deleted."""

    method_hints = {
        "DELETE": "Labels are never deleted: change the answer with PUT or PATCH (its history is kept).",
        "POST": "POST a new label to /api/labels/.",
    }

    def _label(self, request: Request, pk: int) -> Label:
        label = _labels_visible_to(request.user).filter(pk=pk).first()
        if label is None:
            raise not_found(f"No label {pk} that you may see.")
        return label

    @extend_schema(
        operation_id="labels_retrieve",
        tags=["labeling"],
        responses={200: LabelOutput, **error_responses({404: "No label with this id that you may see."})},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(LabelOutput(self._label(request, pk)).data)

    @extend_schema(
        operation_id="labels_update",
        tags=["labeling"],
        request=LabelChangeInput,
        responses={200: LabelOutput, **_CHANGE_ERRORS},
        examples=[OpenApiExample("Change the answer", value={"value": "female"}, request_only=True)],
    )
    def put(self, request: Request, pk: int) -> Response:
        return self._change(request, pk, partial=False)

    @extend_schema(
        operation_id="labels_partial_update",
        tags=["labeling"],
        request=LabelChangeInput,
        responses={200: LabelOutput, **_CHANGE_ERRORS},
    )
    def patch(self, request: Request, pk: int) -> Response:
        return self._change(request, pk, partial=True)

    def _change(self, request: Request, pk: int, *, partial: bool) -> Response:
        """PUT replaces the answer and its reason; PATCH changes only what it names."""
        label = self._label(request, pk)
        if label.annotator_id != request.user.pk:
            raise PermissionDenied("Only the annotator who gave a label may change it.")
        data = LabelChangeInput(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        # Only this label is written: a concurrent change to another answer is not reverted.
        try:
            services.label_change(
                label=label,
                annotator=request.user,
                value=body.get("value"),
                reason=body.get("reason", None if partial else ""),
            )
        except (Item.DoesNotExist, Label.DoesNotExist) as exc:  # its item was removed meanwhile
            raise not_found(f"Label {pk} was removed with its item.") from exc
        except errors.AnnotateError as exc:
            raise_for(exc)
        return Response(LabelOutput(self._label(request, pk)).data)
