"""Disputes (researchers): the disputed (item, question)s, one in detail, and its resolution."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from annotate import errors, selectors, services
from annotate.api.common import (
    RESEARCHERS_ONLY,
    UNKNOWN_ITEM,
    UNKNOWN_STUDY,
    item_or_404,
    query_with_study,
    question_of,
    raise_for,
)
from annotate.models import FinalLabel, ItemState
from annotate.serializers.disputes import (
    DisputeDetailOutput,
    DisputeRowOutput,
    FinalLabelOutput,
    ResolveUnresolvableInput,
    ResolveValueInput,
)
from annotate.serializers.studies import StudyQuery
from config.api import AuthenticatedRequest, ResearcherApi, error_responses
from studies.models import Item
from studies.selectors import item_images, item_main_image, with_images


def _item_summary(item: Item) -> dict[str, Any]:
    main = item_main_image(item)
    return {
        "item": item.pk,
        "image": item.pk,
        "key": item.key,
        "source_path": main.source_path if main else None,
        "t2i_model": item.t2i_model,
        "prompt": item.prompt.text if item.prompt else None,
        "url": main.image.url if main else None,
        "images": list(item_images(item).values()),  # ItemImage rows: the serializer shapes them
    }


class DisputeListApi(ResearcherApi):
    """Every disputed (item, question) of ``?study=``, each with its labels and who gave them."""

    @extend_schema(
        operation_id="disputes_list",
        tags=["disputes"],
        parameters=[StudyQuery],
        responses={
            200: DisputeRowOutput(many=True),
            **error_responses(
                {400: "?study= is missing, empty or given twice.", 403: RESEARCHERS_ONLY, 404: UNKNOWN_STUDY}
            ),
        },
    )
    def get(self, request: Request) -> Response:
        _params, study = query_with_study(request, StudyQuery)
        rows = [
            {
                **_item_summary(row.item),
                "question": row.question.key,
                "question_text": row.question.text,
                "state": ItemState.DISPUTED.value,
                "labels": [
                    {
                        "annotator": name,
                        "value": value,
                        "display": row.question.display(value),
                        "reason": reason,
                    }
                    for name, value, reason in row.labels
                ],
                "n_labels": row.n_labels,
                "n_needed": row.n_needed,
            }
            for row in selectors.dispute_queue(study=study)
        ]
        return Response(DisputeRowOutput(rows, many=True).data)


class DisputeDetailApi(ResearcherApi):
    """One item's answers per question, with their state, labels and final answer; ``labels``
    and ``question`` at the top level are those of its only question (one-question items)."""

    @extend_schema(
        operation_id="disputes_retrieve",
        tags=["disputes"],
        responses={200: DisputeDetailOutput, **error_responses({403: RESEARCHERS_ONLY, 404: UNKNOWN_ITEM})},
    )
    def get(self, request: Request, pk: int) -> Response:
        item = item_or_404(with_images(Item.objects.select_related("study", "prompt")), pk)
        detail = selectors.item_detail(item=item)
        questions = detail["questions"]  # the serializer keeps the fields it declares
        body: dict[str, Any] = {**_item_summary(item), "state": detail["state"], "questions": questions}
        if len(questions) == 1:
            body.update(question=questions[0]["question"].key, labels=questions[0]["labels"])
        return Response(DisputeDetailOutput(body).data)


RESOLVE = PolymorphicProxySerializer(
    component_name="DisputeResolve",
    serializers=[ResolveValueInput, ResolveUnresolvableInput],
    resource_type_field_name=None,
)


class DisputeResolveApi(ResearcherApi):
    """Set the final answer of one (item, question): a value, or ``unresolvable: true``."""

    @extend_schema(
        operation_id="disputes_resolve",
        tags=["disputes"],
        request=RESOLVE,
        examples=[
            OpenApiExample(
                "Set the final answer",
                value={"value": "female", "note": "long hair, dress"},
                request_only=True,
            ),
            OpenApiExample(
                "Nobody can tell", value={"unresolvable": True, "note": "too blurred"}, request_only=True
            ),
        ],
        responses={
            200: OpenApiResponse(FinalLabelOutput, description="The final answer now stored."),
            **error_responses(
                {
                    400: "Invalid body, or an answer the question does not allow, a question the item "
                    "does not ask, a missing question on a multi-question item, a question without an "
                    "answer for unresolvable disputes (codes invalid_answer, unknown_question, "
                    "question_required).",
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_ITEM,
                    409: "The (item, question) is not disputed (labels missing or in agreement).",
                }
            ),
        },
    )
    def post(self, request: AuthenticatedRequest, pk: int) -> Response:
        item = item_or_404(Item.objects.select_related("study"), pk)
        unresolvable = isinstance(request.data, dict) and request.data.get("unresolvable") is True
        data = (ResolveUnresolvableInput if unresolvable else ResolveValueInput)(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        question = question_of(item, body.get("question"))
        try:
            final = services.dispute_resolve(
                item=item,
                question=question,
                researcher=request.user,
                value=None if unresolvable else body["value"],
                note=body["note"],
            )
        except errors.AnnotateError as exc:
            raise_for(exc)
        final = FinalLabel.objects.select_related("question", "decided_by").get(pk=final.pk)
        return Response(FinalLabelOutput(final).data)
