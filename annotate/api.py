"""REST API of the human side: one small view per action, explicit serializers.

Object-level rules: an annotator only ever reaches their own labels and the images they hold a
seat on; everything else answers 404 (it does not exist for them) whatever the HTTP verb.
Researcher-only endpoints answer 403 to annotators for every verb.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, PermissionDenied
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate import errors, roles, selectors, services
from annotate.models import Image, ImageState, Label, Study
from annotate.serializers import (
    AgreementQuery,
    DisputeOutput,
    DisputeResolveInput,
    ExportQuery,
    FinalLabelOutput,
    ImageOutput,
    LabelChangeInput,
    LabelOutput,
    LabelSubmitInput,
    NextImageOutput,
    StudyOutput,
)

ALL_VERBS = ["get", "post", "put", "patch", "delete"]


class IsResearcher(BasePermission):
    message = "Only researchers and admins may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_researcher(request.user)


class IsAnnotator(BasePermission):
    message = "Only annotators may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        return roles.is_annotator(request.user)


class DomainConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def _raise_for(exc: errors.AnnotateError) -> None:
    """Turn a domain error into the HTTP answer a client can act on."""
    message = str(exc)
    if isinstance(exc, errors.NotAssigned):
        raise PermissionDenied(message) from exc
    if isinstance(exc, errors.NothingToUndo):
        raise NotFound(message) from exc
    if isinstance(exc, errors.AlreadyResolved | errors.ImageFull | errors.NotDisputed):
        raise DomainConflict(message) from exc
    raise DomainValidation(message) from exc


class DomainValidation(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"


def _check_filters(*, study: Study, t2i_model: str | None, category: str | None) -> None:
    """A typo in a filter gets a 400 naming what exists, not an empty answer."""
    from reports.selectors import UnknownFilter, check_filters

    try:
        check_filters(study=study, t2i_model=t2i_model or None, category=category or None)
    except UnknownFilter as exc:
        raise DomainValidation(str(exc)) from exc


def _study_for(user: Any, slug: str) -> Study:
    """The study by slug, or 404 for an annotator who is not on it."""
    qs: QuerySet[Study] = Study.objects.all()
    if not roles.is_researcher(user):
        qs = selectors.studies_for_annotator(user=user)
    return get_object_or_404(qs, slug=slug)


def _study_param(request: Request) -> Study:
    """The study named by ``?study=<slug>``: 400 naming the known slugs when missing, 404 when unknown."""
    slug = request.query_params.get("study", "")
    if not slug:
        known = ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise DomainValidation(f"Give the study as ?study=<slug> (existing studies: {known}).")
    return get_object_or_404(Study, slug=slug)


class StudyListApi(APIView):
    def get(self, request: Request) -> Response:
        user = request.user
        if roles.is_researcher(user):
            studies = Study.objects.all()
        elif roles.is_annotator(user):
            studies = selectors.studies_for_annotator(user=user)
        else:
            raise PermissionDenied("You have no role in BiasLab yet; ask an admin.")
        return Response(StudyOutput(studies, many=True).data)


class ImageListApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request) -> Response:
        study = _study_param(request)
        _check_filters(
            study=study,
            t2i_model=request.query_params.get("t2i_model"),
            category=request.query_params.get("category"),
        )
        state = request.query_params.get("state")
        if state and state not in ImageState.values:
            raise DomainValidation(f"Unknown state '{state}' (states: {', '.join(ImageState.values)}).")
        images = selectors.images_with_state(study=study).select_related("prompt", "study", "final_label")
        for param, lookup in (
            ("t2i_model", "t2i_model"),
            ("state", "state"),
            ("category", "prompt__category"),
        ):
            if request.query_params.get(param):
                images = images.filter(**{lookup: request.query_params[param]})
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(images.order_by("id"), request, view=self)
        return paginator.get_paginated_response(ImageOutput(page, many=True).data)


class ImageDetailApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request, pk: int) -> Response:
        image = get_object_or_404(Image.objects.select_related("study", "prompt"), pk=pk)
        return Response(_jsonable(selectors.image_detail(image=image)))


class NextImageApi(APIView):
    """The annotator's current image (and the ones to preload), claiming seats as needed."""

    permission_classes = [IsAuthenticated, IsAnnotator]

    def get(self, request: Request, slug: str) -> Response:
        study = _study_for(request.user, slug)
        try:
            queue = services.assignment_queue(study=study, annotator=request.user)
        except errors.AnnotateError as exc:
            _raise_for(exc)
        progress = selectors.annotator_progress(study=study, annotator=request.user)
        payload: dict[str, Any] = {"image": None, "done": progress.done, "remaining": progress.remaining}
        if queue:
            image = queue[0].image
            payload.update(
                image=image.pk,
                url=image.url,
                width=image.width,
                height=image.height,
                # Hidden by default: the prompt could prime the annotator (study setting).
                prompt=image.prompt.text if study.show_prompt else None,
                preload=[seat.image.url for seat in queue[1:]],
                label_set=study.label_set,
            )
        return Response(NextImageOutput(payload).data)


def _labels_visible_to(user: Any) -> QuerySet[Label]:
    labels = Label.objects.select_related("annotator", "image__study").order_by("id")
    if roles.is_researcher(user):
        return labels
    return labels.filter(annotator=user)


class LabelListApi(APIView):
    """GET: your labels (researchers: everyone's). POST: submit a label for an image you hold."""

    def get(self, request: Request) -> Response:
        if not (roles.is_researcher(request.user) or roles.is_annotator(request.user)):
            raise PermissionDenied("You have no role in BiasLab yet; ask an admin.")
        labels = _labels_visible_to(request.user)
        if request.query_params.get("study"):
            labels = labels.filter(image__study__slug=request.query_params["study"])
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(labels, request, view=self)
        return paginator.get_paginated_response(LabelOutput(page, many=True).data)

    def post(self, request: Request) -> Response:
        if not roles.is_annotator(request.user):
            raise PermissionDenied("Only annotators submit labels.")
        data = LabelSubmitInput(data=request.data)
        data.is_valid(raise_exception=True)
        image_id = data.validated_data["image"]
        # Images the annotator holds no seat on do not exist for them (404, whatever the reason).
        image = (
            Image.objects.select_related("study")
            .filter(assignments__annotator=request.user, pk=image_id)
            .first()
        )
        if image is None:
            raise NotFound(f"Image {image_id} is not one of the images assigned to you.")
        try:
            label = services.annotation_submit(
                image=image,
                annotator=request.user,
                value=data.validated_data["value"],
                reason=data.validated_data["reason"],
                duration_ms=data.validated_data["duration_ms"],
                request_id=data.validated_data["request_id"],
            )
        except errors.AnnotateError as exc:
            _raise_for(exc)
        return Response(LabelOutput(label).data, status=status.HTTP_201_CREATED)


class LabelDetailApi(APIView):
    """One label. Someone else's label does not exist for an annotator: 404 on every verb."""

    def _label(self, request: Request, pk: int) -> Label:
        return get_object_or_404(_labels_visible_to(request.user), pk=pk)

    def get(self, request: Request, pk: int) -> Response:
        return Response(LabelOutput(self._label(request, pk)).data)

    def put(self, request: Request, pk: int) -> Response:
        label = self._label(request, pk)
        if label.annotator_id != request.user.pk:
            raise PermissionDenied("Only the annotator who gave a label may change it.")
        data = LabelChangeInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            label = services.annotation_submit(
                image=label.image,
                annotator=request.user,
                value=data.validated_data["value"],
                reason=data.validated_data["reason"],
            )
        except errors.AnnotateError as exc:
            _raise_for(exc)
        return Response(LabelOutput(label).data)

    patch = put

    def delete(self, request: Request, pk: int) -> Response:
        self._label(request, pk)
        raise PermissionDenied("Labels are never deleted; change the label instead (history is kept).")

    def post(self, request: Request, pk: int) -> Response:
        self._label(request, pk)
        raise PermissionDenied("POST a new label to /api/labels/.")


class DisputeListApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request) -> Response:
        study = _study_param(request)
        # Both labels of every image in two queries, not one query per image.
        images = list(selectors.dispute_queue(study=study).prefetch_related(_labels_with_annotators()))
        return Response(DisputeOutput([_with_labels(image) for image in images], many=True).data)


def _labels_with_annotators() -> Prefetch:
    return Prefetch("labels", queryset=Label.objects.select_related("annotator").order_by("annotator_id"))


def _with_labels(image: Image) -> Image:
    image.labels_out = [
        {"annotator": label.annotator.username, "value": label.value, "reason": label.reason}
        for label in image.labels.all()
    ]
    image.state = getattr(image, "state", None) or selectors.image_state(image)
    return image


class DisputeDetailApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request, pk: int) -> Response:
        images = Image.objects.select_related("prompt", "study").prefetch_related(_labels_with_annotators())
        image = get_object_or_404(images, pk=pk)
        return Response(DisputeOutput(_with_labels(image)).data)


class DisputeResolveApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def post(self, request: Request, pk: int) -> Response:
        image = get_object_or_404(Image.objects.select_related("study"), pk=pk)
        data = DisputeResolveInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            if data.validated_data["unresolvable"]:
                final = services.dispute_resolve_unresolvable(
                    image=image, researcher=request.user, note=data.validated_data["note"]
                )
            else:
                final = services.dispute_resolve(
                    image=image,
                    researcher=request.user,
                    value=data.validated_data["value"],
                    note=data.validated_data["note"],
                )
        except errors.AnnotateError as exc:
            _raise_for(exc)
        return Response(FinalLabelOutput(final).data)


class AgreementApi(APIView):
    permission_classes = [IsAuthenticated, IsResearcher]

    def get(self, request: Request) -> Response:
        from reports.report import agreement_report

        query = AgreementQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        study = get_object_or_404(Study, slug=query.validated_data["study"])
        _check_filters(
            study=study,
            t2i_model=query.validated_data.get("t2i_model"),
            category=query.validated_data.get("category"),
        )
        report = agreement_report(
            study=study,
            t2i_model=query.validated_data.get("t2i_model"),
            category=query.validated_data.get("category"),
        )
        return Response(_jsonable(report))


class CSVRenderer(BaseRenderer):
    """Lets DRF's ``?format=csv`` negotiation pick CSV; the view builds the bytes itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class GroundTruthExportApi(APIView):
    """Ground truth of a study: JSON rows, or the same rows as a CSV download."""

    permission_classes = [IsAuthenticated, IsResearcher]
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    def get(self, request: Request) -> Response | HttpResponse:
        from annotate.exchange import ground_truth_export, ground_truth_rows

        query = ExportQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        study = get_object_or_404(Study, slug=query.validated_data["study"])
        # ?format=csv or an "Accept: text/csv" header: both must give the CSV file, never the
        # rows rendered by CSVRenderer's str() fallback.
        wants_csv = getattr(request.accepted_renderer, "format", "") == "csv"
        if query.validated_data["format"] == "csv" or wants_csv:
            response = HttpResponse(ground_truth_export(study=study, fmt="csv"), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{study.slug}-ground-truth.csv"'
            return response
        return Response(ground_truth_rows(study=study))


def _jsonable(value: Any) -> Any:
    """Dataclasses and tuples from selectors/metrics → plain JSON types."""
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
