"""REST API of the human side: one small view per action, explicit serializers, and the OpenAPI
description of each (drf-spectacular reads the ``extend_schema`` next to every method).

The labelled unit is an item; a label is one annotator's answer to one question about it.
Object-level rules: an annotator only ever reaches their own labels and the items they hold a
seat on; everything else answers 404 (it does not exist for them). Researcher-only endpoints
answer 403 to annotators and outsiders. A method an endpoint lacks is 405 for everyone
(``config.api``); every error is the JSON ``Error`` shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypedDict, cast

from django.db.models import Q, QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from annotate import errors, selectors, services
from annotate.agreement import agreement_report
from annotate.models import FinalLabel, ItemState, Label
from annotate.serializers import (
    GROUND_TRUTH_CSV,
    GROUND_TRUTH_ROW_SCHEMA,
    AgreementOutput,
    AgreementQuery,
    DisputeDetailOutput,
    DisputeRowOutput,
    ExportQuery,
    FinalLabelOutput,
    ItemDetailOutput,
    ItemOutput,
    ItemQuery,
    LabelAnswerInput,
    LabelAnswersInput,
    LabelChangeInput,
    LabelOutput,
    LabelQuery,
    NextItemOutput,
    QuestionOutput,
    QueueItemOutput,
    ResolveUnresolvableInput,
    ResolveValueInput,
    StudyOutput,
    StudyQuery,
    images_of,
)
from config.api import (
    ApiView,
    AuthenticatedRequest,
    QueryInput,
    StrictPageNumberPagination,
    conflict,
    error_responses,
    invalid,
    not_found,
)
from studies import permissions
from studies.models import Item, Question, Study
from studies.permissions import IsResearcher
from studies.selectors import item_images, item_main_image, item_questions, study_questions, with_images

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class IsAnnotator(BasePermission):
    message = "Only annotators may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return permissions.is_annotator(request.user)


def _raise_for(exc: errors.AnnotateError) -> NoReturn:
    """Turn a domain error into the HTTP answer a client can act on."""
    message = str(exc)
    if isinstance(exc, errors.NotAssigned):
        raise PermissionDenied(message) from exc
    if isinstance(exc, errors.NothingToUndo):
        raise not_found(message) from exc
    if isinstance(exc, errors.AlreadyResolved | errors.ItemFull | errors.NotDisputed | errors.StaleSubmit):
        raise conflict(message) from exc
    if isinstance(exc, errors.InvalidLabel):
        raise invalid(message, code="invalid_answer") from exc
    raise invalid(message, code="invalid") from exc


def _check_filters(*, study: Study, t2i_model: str | None, category: str | None) -> None:
    """A typo in a filter gets a 400 naming what exists, not an empty answer."""
    if t2i_model:
        models = sorted(set(study.items.order_by().values_list("t2i_model", flat=True)))
        if t2i_model not in models:
            raise invalid(
                f"Unknown T2I model '{t2i_model}' in study {study.slug} (models: {', '.join(models) or 'none'}).",
                code="unknown_filter",
                field="t2i_model",
            )
    if category:
        categories = sorted(set(study.prompts.order_by().values_list("category", flat=True)))
        if category not in categories:
            raise invalid(
                f"Unknown category '{category}' in study {study.slug} "
                f"(categories: {', '.join(categories) or 'none'}).",
                code="unknown_filter",
                field="category",
            )


def _studies_visible_to(user: Any) -> QuerySet[Study]:
    if permissions.is_researcher(user):
        return Study.objects.order_by("name")
    return selectors.studies_for_annotator(user=user)


def _query_with_study(request: Request, query: type[QueryInput]) -> tuple[dict[str, Any], Study]:
    """The validated ``?study=&…`` parameters and the study they name. A missing study is a 400
    naming the studies the user may ask about; one they may not see, 404."""
    if "study" not in request.query_params:
        known = ", ".join(_studies_visible_to(request.user).values_list("slug", flat=True)) or "none yet"
        raise ValidationError({"study": [f"Give the study as ?study=<slug> (existing studies: {known})."]})
    params = query.parse(request)
    study = _studies_visible_to(request.user).filter(slug=params["study"]).first()
    if study is None:
        raise not_found(f"There is no study '{params['study']}' you may see.")
    return params, study


def _visible_study(user: Any, slug: str) -> Study:
    """The study by slug for a researcher, or for an annotator on it; 404 for anyone else."""
    study = _studies_visible_to(user).filter(slug=slug).first()
    if study is None:
        raise not_found(f"There is no study '{slug}' you may see.")
    return study


def _question_of(item: Item, key: str | None) -> Question:
    """The question ``key`` of the item; without a key, the item's only question. 400 naming the
    item's questions otherwise."""
    asked = item_questions(item, study_questions(item.study))
    if key:
        for question in asked:
            if question.key == key:
                return question
        raise invalid(
            f"Item {item.pk} does not ask the question '{key}' (it asks: {', '.join(q.key for q in asked)}).",
            code="unknown_question",
            field="question",
        )
    if len(asked) == 1:
        return asked[0]
    raise invalid(
        f"Item {item.pk} asks several questions: name one as 'question' ({', '.join(q.key for q in asked)}).",
        code="question_required",
        field="question",
    )


def _no_role() -> PermissionDenied:
    return PermissionDenied("You have no role in BiasLab yet; ask an admin.")


# Sentences of the errors the endpoints answer (the schema shows them next to each status).
NO_ROLE = "Not logged in, or no role in BiasLab."
RESEARCHERS_ONLY = "Not logged in, or not a researcher or admin."
UNKNOWN_ITEM = "No item with this id."
BAD_STUDY_QUERY = (
    "?study= is missing, empty or given twice, or a filter is not among the study's values "
    "(code unknown_filter, naming the values that exist)."
)
UNKNOWN_STUDY = "No study with this slug that you may see."


# --- Studies and questions ----------------------------------------------------------------------


class StudyListApi(ApiView):
    """Researchers: every study; annotators: the studies they label. Each with its questions."""

    @extend_schema(
        operation_id="studies_list",
        tags=["studies"],
        responses={200: StudyOutput(many=True), **error_responses({403: NO_ROLE})},
    )
    def get(self, request: Request) -> Response:
        user = request.user
        if not (permissions.is_researcher(user) or permissions.is_annotator(user)):
            raise _no_role()
        return Response(StudyOutput(_studies_visible_to(user), many=True).data)


class QuestionListApi(ApiView):
    """The questions of ``?study=`` with their choices and keys: researchers, and annotators of
    that study."""

    @extend_schema(
        operation_id="questions_list",
        tags=["studies"],
        parameters=[StudyQuery],
        responses={
            200: QuestionOutput(many=True),
            **error_responses(
                {
                    400: "?study= is missing, empty or given twice.",
                    403: NO_ROLE,
                    404: "No study with this slug that you may see (annotators: only their studies).",
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        if not (permissions.is_researcher(request.user) or permissions.is_annotator(request.user)):
            raise _no_role()
        _params, study = _query_with_study(request, StudyQuery)
        return Response(QuestionOutput(study_questions(study), many=True).data)


# --- Labeling (annotators) ----------------------------------------------------------------------


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
        study = _visible_study(request.user, slug)
        try:
            queue = services.assignment_queue(study=study, annotator=request.user)
        except errors.AnnotateError as exc:
            _raise_for(exc)
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
        if not (permissions.is_researcher(request.user) or permissions.is_annotator(request.user)):
            raise _no_role()
        params = LabelQuery.parse(request)
        labels = _labels_visible_to(request.user)
        if params.get("study"):
            labels = labels.filter(item__study__slug=params["study"])
        if params.get("item"):
            labels = labels.filter(item_id=params["item"])
        if params.get("question"):
            labels = labels.filter(question__key=params["question"])
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
            question = _question_of(item, body.get("question"))
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
            _raise_for(exc)
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
        # Only this label is read (under the item lock, by the service) and written: the
        # annotator's other answers on the item are left alone, so a concurrent change to one
        # of them is not reverted.
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
            _raise_for(exc)
        return Response(LabelOutput(self._label(request, pk)).data)


# --- Items (researchers) ------------------------------------------------------------------------


class ItemListApi(ApiView):
    """The items of ``?study=`` with state and final answers, filtered by T2I model, category,
    state, or text in the key or prompt."""

    permission_classes = [IsAuthenticated, IsResearcher]
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
        params, study = _query_with_study(request, ItemQuery)
        _check_filters(study=study, t2i_model=params.get("t2i_model"), category=params.get("category"))
        items = selectors.items_with_state(study=study).select_related("prompt")
        for param, lookup in (
            ("t2i_model", "t2i_model"),
            ("state", "state"),
            ("category", "prompt__category"),
        ):
            if params.get(param):
                items = items.filter(**{lookup: params[param]})
        if params.get("q"):
            items = items.filter(Q(key__icontains=params["q"]) | Q(prompt__text__icontains=params["q"]))
        items = with_images(items.order_by("id")).prefetch_related("final_labels")

        def serialize(page: list[Item]) -> Any:
            for item in page:
                item.study = study  # one study object: its questions are read once
            return ItemOutput(page, many=True).data

        return self.paginated(items, serialize)


@extend_schema_view(get=extend_schema(operation_id="images_list", deprecated=True))
class ImageListApi(ItemListApi):
    """/api/images/: the one-image era's name of /api/items/."""


def _label_row(label: dict[str, Any]) -> dict[str, Any]:
    keep = ("annotator", "value", "display", "reason", "duration_ms", "created_at", "updated_at")
    return {key: label[key] for key in keep}


class _ItemDetailFields(TypedDict):
    state: str
    n_labels: int
    questions_detail: list[dict[str, Any]]
    label_history: list[dict[str, Any]]
    final_label_history: list[dict[str, Any]]


class ItemDetailApi(ApiView):
    """One item: its images by role, state, and per question the labels, the final answer and
    the history of both in time order."""

    permission_classes = [IsAuthenticated, IsResearcher]

    @extend_schema(
        operation_id="items_retrieve",
        tags=["items"],
        responses={200: ItemDetailOutput, **error_responses({403: RESEARCHERS_ONLY, 404: UNKNOWN_ITEM})},
    )
    def get(self, request: Request, pk: int) -> Response:
        item = (
            with_images(Item.objects.select_related("study", "prompt"))
            .prefetch_related("final_labels")
            .filter(pk=pk)
            .first()
        )
        if item is None:
            raise not_found(f"No item {pk}.")
        detail = selectors.item_detail(item=item)
        rows = selectors.items_with_state(study=item.study).filter(pk=item.pk)
        # The attributes ItemDetailOutput reads besides the model's, set here (cast: for the type).
        item = cast("WithAnnotations[Item, _ItemDetailFields]", item)
        item.state, item.n_labels = rows.values_list("state", "n_labels").get()
        item.questions_detail = [
            {
                "key": section["question"].key,
                "text": section["question"].text,
                "state": section["state"],
                "labels": [_label_row(label) for label in section["labels"]],
                "final_label": section["final_label"],
            }
            for section in detail["questions"]
        ]
        item.label_history = detail["label_history"]
        item.final_label_history = detail["final_label_history"]
        return Response(ItemDetailOutput(item).data)


@extend_schema_view(get=extend_schema(operation_id="images_retrieve", deprecated=True))
class ImageDetailApi(ItemDetailApi):
    """/api/images/<id>/: the one-image era's name of /api/items/<id>/."""


# --- Disputes (researchers) ---------------------------------------------------------------------


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


def _dispute_labels(question: Question, labels: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    return [
        {"annotator": username, "value": value, "display": question.display(value), "reason": reason}
        for username, value, reason in labels
    ]


class DisputeListApi(ApiView):
    """Every disputed (item, question) of ``?study=``, each with its labels and who gave them."""

    permission_classes = [IsAuthenticated, IsResearcher]

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
        _params, study = _query_with_study(request, StudyQuery)
        rows = [
            {
                **_item_summary(row.item),
                "question": row.question.key,
                "question_text": row.question.text,
                "state": ItemState.DISPUTED.value,
                "labels": _dispute_labels(row.question, row.labels),
                "n_labels": row.n_labels,
                "n_needed": row.n_needed,
            }
            for row in selectors.dispute_queue(study=study)
        ]
        return Response(DisputeRowOutput(rows, many=True).data)


class DisputeDetailApi(ApiView):
    """One item's answers per question, with their state, labels and final answer; ``labels``
    and ``question`` at the top level are those of its only question (one-question items)."""

    permission_classes = [IsAuthenticated, IsResearcher]

    @extend_schema(
        operation_id="disputes_retrieve",
        tags=["disputes"],
        responses={200: DisputeDetailOutput, **error_responses({403: RESEARCHERS_ONLY, 404: UNKNOWN_ITEM})},
    )
    def get(self, request: Request, pk: int) -> Response:
        item = with_images(Item.objects.select_related("study", "prompt")).filter(pk=pk).first()
        if item is None:
            raise not_found(f"No item {pk}.")
        detail = selectors.item_detail(item=item)
        questions = [
            {
                "question": section["question"].key,
                "question_text": section["question"].text,
                "state": section["state"],
                "labels": [
                    {key: label[key] for key in ("annotator", "value", "display", "reason")}
                    for label in section["labels"]
                ],
                "final_label": section["final_label"],
            }
            for section in detail["questions"]
        ]
        body: dict[str, Any] = {**_item_summary(item), "state": detail["state"], "questions": questions}
        if len(questions) == 1:
            body.update(question=questions[0]["question"], labels=questions[0]["labels"])
        return Response(DisputeDetailOutput(body).data)


RESOLVE = PolymorphicProxySerializer(
    component_name="DisputeResolve",
    serializers=[ResolveValueInput, ResolveUnresolvableInput],
    resource_type_field_name=None,
)


class DisputeResolveApi(ApiView):
    """Set the final answer of one (item, question): a value, or ``unresolvable: true``."""

    permission_classes = [IsAuthenticated, IsResearcher]

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
        item = Item.objects.select_related("study").filter(pk=pk).first()
        if item is None:
            raise not_found(f"No item {pk}.")
        unresolvable = isinstance(request.data, dict) and request.data.get("unresolvable") is True
        data = (ResolveUnresolvableInput if unresolvable else ResolveValueInput)(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        question = _question_of(item, body.get("question"))
        try:
            if unresolvable:
                final = services.dispute_resolve_unresolvable(
                    item=item, question=question, researcher=request.user, note=body["note"]
                )
            else:
                final = services.dispute_resolve(
                    item=item,
                    question=question,
                    researcher=request.user,
                    value=body["value"],
                    note=body["note"],
                )
        except errors.AnnotateError as exc:
            _raise_for(exc)
        final = FinalLabel.objects.select_related("question", "decided_by").get(pk=final.pk)
        return Response(FinalLabelOutput(final).data)


# --- Agreement and ground truth (researchers) ---------------------------------------------------


class AgreementApi(ApiView):
    """Agreement on one question of ``?study=`` (``?question=``, default the first), optionally
    of one ``t2i_model`` / ``category``."""

    permission_classes = [IsAuthenticated, IsResearcher]

    @extend_schema(
        operation_id="agreement_retrieve",
        tags=["agreement"],
        parameters=[AgreementQuery],
        responses={
            200: AgreementOutput,
            **error_responses(
                {
                    400: BAD_STUDY_QUERY + " Or a question the study does not ask (code unknown_question).",
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_STUDY,
                }
            ),
        },
    )
    def get(self, request: Request) -> Response:
        params, study = _query_with_study(request, AgreementQuery)
        _check_filters(study=study, t2i_model=params.get("t2i_model"), category=params.get("category"))
        questions = study_questions(study)
        if not questions:
            raise invalid(f"The study {study.slug} has no questions.", code="no_questions")
        question = questions[0]
        if params.get("question"):
            chosen = next((q for q in questions if q.key == params["question"]), None)
            if chosen is None:
                raise invalid(
                    f"Unknown question '{params['question']}' (questions: {', '.join(q.key for q in questions)}).",
                    code="unknown_question",
                    field="question",
                )
            question = chosen
        report = agreement_report(
            study=study,
            question=question,
            t2i_model=params.get("t2i_model") or None,
            category=params.get("category") or None,
        )
        return Response(AgreementOutput(report).data)


class CSVRenderer(BaseRenderer):
    """Lets DRF's ``?format=csv`` negotiation pick CSV; the view builds the bytes itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class GroundTruthExportApi(ApiView):
    """Ground truth of a study, one row per (item, question): JSON rows, or a CSV download
    (``?format=csv`` or ``Accept: text/csv``). Errors are JSON either way."""

    permission_classes = [IsAuthenticated, IsResearcher]
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(
        operation_id="ground_truth_retrieve",
        tags=["ground truth"],
        parameters=[ExportQuery],
        responses={
            (200, "application/json"): OpenApiResponse(
                {"type": "array", "items": GROUND_TRUTH_ROW_SCHEMA},
                description="One row per (item, question).",
            ),
            (200, "text/csv"): OpenApiResponse(GROUND_TRUTH_CSV, description="The same rows as a CSV file."),
            **error_responses(
                {
                    400: "?study= or ?format= is missing, empty, unknown or given twice.",
                    403: RESEARCHERS_ONLY,
                    404: UNKNOWN_STUDY,
                }
            ),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        from annotate.exports import ground_truth_export, ground_truth_rows

        params, study = _query_with_study(request, ExportQuery)
        # ?format=csv or an "Accept: text/csv" header: both must give the CSV file, never the
        # rows rendered by CSVRenderer's str() fallback.
        wants_csv = getattr(request.accepted_renderer, "format", "") == "csv"
        if params.get("format") == "csv" or wants_csv:
            response = HttpResponse(ground_truth_export(study=study, fmt="csv"), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{study.slug}-ground-truth.csv"'
            return response
        return Response(ground_truth_rows(study=study))


# --- Links between operations (OpenAPI) ---------------------------------------------------------

#: (operation, status) → {link name: link}: how a client goes from one answer to the next
#: request — the labelling session (study → next item → submit → change) and the researcher's
#: (disputes → resolve, items → item). Schemathesis' stateful phase follows them too.
LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("studies_list", "200"): {
        "NextItem": {"operationId": "next_item", "parameters": {"slug": "$response.body#/0/slug"}},
        "Questions": {"operationId": "questions_list", "parameters": {"study": "$response.body#/0/slug"}},
    },
    ("next_item", "200"): {
        "SubmitFirstChoice": {
            "operationId": "labels_create",
            "description": "Answer the current item's first question with its first choice.",
            "requestBody": {
                "item": "$response.body#/item/id",
                "question": "$response.body#/item/questions/0/key",
                "value": "$response.body#/item/questions/0/choices/0/value",
            },
        },
    },
    ("labels_create", "201"): {
        "ReadLabel": {"operationId": "labels_retrieve", "parameters": {"id": "$response.body#/id"}},
        "ChangeLabel": {"operationId": "labels_update", "parameters": {"id": "$response.body#/id"}},
        "PatchLabel": {"operationId": "labels_partial_update", "parameters": {"id": "$response.body#/id"}},
    },
    ("labels_list", "200"): {
        "ReadLabel": {"operationId": "labels_retrieve", "parameters": {"id": "$response.body#/results/0/id"}},
    },
    ("disputes_list", "200"): {
        "ReadDispute": {"operationId": "disputes_retrieve", "parameters": {"id": "$response.body#/0/item"}},
        "ResolveWithFirstLabel": {
            "operationId": "disputes_resolve",
            "description": "Settle the first dispute with its first annotator's answer.",
            "parameters": {"id": "$response.body#/0/item"},
            "requestBody": {
                "question": "$response.body#/0/question",
                "value": "$response.body#/0/labels/0/value",
            },
        },
    },
    ("items_list", "200"): {
        "ReadItem": {"operationId": "items_retrieve", "parameters": {"id": "$response.body#/results/0/id"}},
    },
}


def schema_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: adds ``LINKS`` to the responses they start from."""
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            for status_code, response in operation.get("responses", {}).items():
                links = LINKS.get((operation.get("operationId"), status_code))
                if links:
                    response["links"] = links
    return result
