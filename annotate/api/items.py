"""Items (researchers): the list and one item in detail (``images``: their old names)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict, cast

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response

from annotate import selectors
from annotate.api.common import (
    BAD_STUDY_QUERY,
    RESEARCHERS_ONLY,
    UNKNOWN_ITEM,
    UNKNOWN_STUDY,
    check_filters,
    item_or_404,
    query_with_study,
)
from annotate.serializers.items import ItemDetailOutput, ItemOutput, ItemQuery
from config.api import ResearcherApi, StrictPageNumberPagination, error_responses
from studies.models import Item
from studies.selectors import with_images

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class ItemListApi(ResearcherApi):
    """The items of ``?study=`` with state and final answers, filtered by T2I model, category,
    state, or text in the key or prompt."""

    pagination_class = StrictPageNumberPagination

    @extend_schema(
        operation_id="items_list",
        tags=["items"],
        parameters=[ItemQuery],
        responses={
            200: ItemOutput(many=True),
            **error_responses(
                {
                    400: BAD_STUDY_QUERY,
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_STUDY + " Or a page past the last.",
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        params, study = query_with_study(request, ItemQuery)
        check_filters(study=study, t2i_model=params.get("t2i_model"), category=params.get("category"))
        items = selectors.items_filtered(study=study, filters=params).order_by("id")
        items = with_images(items).prefetch_related("final_labels")

        def serialize(page: list[Item]) -> Any:
            for item in page:
                item.study = study  # one study object: its questions are read once
            return ItemOutput(page, many=True).data

        return self.paginated(items, serialize)


@extend_schema_view(get=extend_schema(operation_id="images_list", deprecated=True))
class ImageListApi(ItemListApi):
    """/api/images/: the one-image era's name of /api/items/."""


class _ItemDetailFields(TypedDict):
    state: str
    n_labels: int
    questions_detail: list[dict[str, Any]]
    label_history: list[dict[str, Any]]
    final_label_history: list[dict[str, Any]]


class ItemDetailApi(ResearcherApi):
    """One item: its images by role, state, and per question the labels, the final answer and
    the history of both in time order."""

    @extend_schema(
        operation_id="items_retrieve",
        tags=["items"],
        responses={200: ItemDetailOutput, **error_responses({403: RESEARCHERS_ONLY, 404: UNKNOWN_ITEM})},
    )
    def get(self, request: Request, pk: int) -> Response:
        item = item_or_404(
            with_images(Item.objects.select_related("study", "prompt")).prefetch_related("final_labels"), pk
        )
        detail = selectors.item_detail(item=item)
        rows = selectors.items_with_state(study=item.study).filter(pk=item.pk)
        # The attributes ItemDetailOutput reads besides the model's, set here (cast: for the type).
        item = cast("WithAnnotations[Item, _ItemDetailFields]", item)
        item.state, item.n_labels = rows.values_list("state", "n_labels").get()
        item.questions_detail = detail["questions"]  # the serializer keeps the fields it declares
        item.label_history = detail["label_history"]
        item.final_label_history = detail["final_label_history"]
        return Response(ItemDetailOutput(item).data)


@extend_schema_view(get=extend_schema(operation_id="images_retrieve", deprecated=True))
class ImageDetailApi(ItemDetailApi):
    """/api/images/<id>/: the one-image era's name of /api/items/<id>/."""
