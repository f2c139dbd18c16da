"""HTML screens of the human side.

Annotators: the labeling screen (one image, one key per label, undo). Researchers: disputes,
images with their state and history, agreement, annotator stats. Views check who may act, call
``annotate.services`` (writes) or ``annotate.selectors`` (reads) and render; the labeling screen
renders its ``label_region`` partial for htmx-style requests (``request.htmx``) and the whole
page otherwise, so it works without JavaScript too (plain forms, post/redirect/get).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse

from annotate import roles, selectors, services
from annotate.errors import (
    AlreadyResolved,
    AnnotateError,
    InvalidLabel,
    NotAssigned,
    NothingToUndo,
)
from annotate.forms import AgreementFilterForm, DisputeResolveForm, ImageFilterForm, LabelSubmitForm
from annotate.models import Image, ImageState, Label, Study

View = Callable[..., HttpResponse]
READ = ("GET", "HEAD")
WRITE = ("POST",)

ALREADY_RESOLVED_NOTICE = "This image was already resolved by a researcher; here is your next one."
SEAT_LOST_NOTICE = (
    "Your reservation of that image expired and it went to someone else; here is your next one."
)
NOTHING_TO_UNDO_NOTICE = "There is no earlier label to go back to."

# --- Permissions ------------------------------------------------------------------------------


def guarded(*, methods: tuple[str, ...], check: Callable[..., bool]) -> Callable[[View], View]:
    """Login, then the role check, then the HTTP method — in that order, so a wrong persona gets
    403 for every verb (never a 405 that tells them the page exists for someone else)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not check(request, **kwargs):
                raise PermissionDenied
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def _researcher(request: HttpRequest, **kwargs: Any) -> bool:
    return roles.is_researcher(request.user)


def _anyone(request: HttpRequest, **kwargs: Any) -> bool:
    return True


def _labeler(request: HttpRequest, slug: str | None = None, **kwargs: Any) -> bool:
    """Annotators of the study in the URL; without one, anyone with the role or a study.

    The study found is kept on the request: the labeling views are on the hot path of every
    key press, so they do not look it up a second time."""
    studies = selectors.studies_for_annotator(user=request.user)
    if slug is not None:
        request.labeling_study = studies.filter(slug=slug).first()
        return request.labeling_study is not None
    return roles.is_annotator(request.user) or studies.exists()


# --- Small helpers ----------------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _int_param(raw: str | None) -> int | None:
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _choose_study(request: HttpRequest, slug: str | None, url_name: str) -> Study | HttpResponse:
    """The study in the URL; without a slug the only study, or a page to pick one."""
    if slug is not None:
        return get_object_or_404(Study, slug=slug)
    studies = list(Study.objects.order_by("name"))
    if len(studies) == 1:
        return studies[0]
    return render(request, "annotate/choose_study.html", {"studies": studies, "url_name": url_name})


# --- Labeling (annotators) --------------------------------------------------------------------


def _label_keys(study: Study) -> list[dict[str, Any]]:
    """The study's label set as buttons: value, name, the key (shown upper-case), reason flag."""
    return [
        {
            "value": item["value"],
            "name": item.get("name", item["value"]),
            "key": str(item.get("key", "")).lower(),
            "requires_reason": bool(item.get("requires_reason")),
        }
        for item in study.label_set
    ]


def _label_context(
    request: HttpRequest,
    study: Study,
    *,
    image: Image | None,
    next_image: Image | None = None,
    current: Label | None = None,
    error: str = "",
    notice: str = "",
    form_data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the label region shows. A re-shown image keeps its request id and start time, so
    a corrected submit is still one submit and its duration counts from the first showing."""
    form_data = form_data or {}
    return {
        "study": study,
        "labels": _label_keys(study),
        "image": image,
        "next_image": next_image,
        "current": current,
        "progress": selectors.annotator_progress(study=study, annotator=request.user),
        "request_id": form_data.get("request_id") or uuid.uuid4().hex,
        "shown_at": form_data.get("shown_at") or _now_ms(),
        "reason": form_data.get("reason", ""),
        "error": error,
        "notice": notice,
    }


def _render_label(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    if not request.htmx:
        return render(request, "annotate/label.html", context, status=status)
    # The partial is rendered on every key press: it needs only the CSRF token, not the
    # context processors (whose role lookup costs a query) that the full page's header uses.
    html = render_to_string("annotate/label.html#label_region", {**context, "csrf_token": get_token(request)})
    return HttpResponse(html, status=status)


def _next_context(request: HttpRequest, study: Study, *, notice: str = "") -> dict[str, Any]:
    """The head of the annotator's queue, with the image after it to preload."""
    queue = services.assignment_queue(study=study, annotator=request.user, size=2)
    return _queue_context(request, study, queue, notice=notice)


def _queue_context(
    request: HttpRequest, study: Study, queue: list[Any], *, notice: str = ""
) -> dict[str, Any]:
    return _label_context(
        request,
        study,
        image=queue[0].image if queue else None,
        next_image=queue[1].image if len(queue) > 1 else None,
        notice=notice,
    )


def _own_label(study: Study, user: Any, image_id: int | None) -> Label | None:
    if image_id is None:
        return None
    return (
        Label.objects.filter(image_id=image_id, image__study=study, annotator=user)
        .select_related("image")
        .first()
    )


def _after_label(request: HttpRequest, study: Study, notice: str = "") -> HttpResponse:
    """Post/redirect/get for plain forms; the next image's partial at once for JavaScript."""
    if request.htmx:
        return _render_label(request, _next_context(request, study, notice=notice))
    if notice:
        messages.warning(request, notice)
    return redirect("annotate:label_study", slug=study.slug)


@guarded(methods=READ, check=_labeler)
def label(request: HttpRequest) -> HttpResponse:
    """Straight into the annotator's only study, or a list of their studies to pick from."""
    studies = list(selectors.studies_for_annotator(user=request.user))
    if len(studies) == 1:
        return redirect("annotate:label_study", slug=studies[0].slug)
    return render(
        request, "annotate/choose_study.html", {"studies": studies, "url_name": "annotate:label_study"}
    )


@guarded(methods=READ, check=_labeler)
def label_study(request: HttpRequest, slug: str) -> HttpResponse:
    """The labeling screen: the next image, or (``?image=ID``) one the annotator labelled
    before, to change its label."""
    study: Study = request.labeling_study
    revisit = _own_label(study, request.user, _int_param(request.GET.get("image")))
    if revisit is not None:
        context = _label_context(request, study, image=revisit.image, current=revisit)
    else:
        try:
            context = _next_context(request, study)
        except NotAssigned as exc:
            raise PermissionDenied(str(exc)) from exc
    return _render_label(request, context)


@guarded(methods=WRITE, check=_labeler)
def label_submit(request: HttpRequest, slug: str, image_id: int) -> HttpResponse:
    """Save one label and move on. Errors re-show the same image with the message.

    The htmx key press saves the label and claims the next image in one transaction
    (``annotation_submit_next``); the image is looked up only on the rare error paths."""
    study: Study = request.labeling_study
    form = LabelSubmitForm(request.POST)
    if not form.is_valid():
        message = " ".join(err for errors in form.errors.values() for err in errors)
        return _render_label(request, _same_image(request, study, image_id, message), status=400)
    data = form.cleaned_data
    submit = {
        "annotator": request.user,
        "value": data["value"],
        "reason": data["reason"],
        "duration_ms": form.duration(_now_ms()),
        "request_id": data["request_id"],
    }
    try:
        if request.htmx:
            outcome = services.annotation_submit_next(study=study, image_id=image_id, **submit)
            return _render_label(request, _queue_context(request, study, outcome.queue))
        services.annotation_submit(image=get_object_or_404(Image, pk=image_id, study=study), **submit)
    except Image.DoesNotExist as exc:
        raise Http404("No such image in this study.") from exc
    except InvalidLabel as exc:
        return _render_label(request, _same_image(request, study, image_id, str(exc)), status=400)
    except AlreadyResolved:
        return _after_label(request, study, notice=ALREADY_RESOLVED_NOTICE)
    except NotAssigned:
        return _after_label(request, study, notice=SEAT_LOST_NOTICE)
    return _after_label(request, study)


def _same_image(request: HttpRequest, study: Study, image_id: int, error: str) -> dict[str, Any]:
    image = get_object_or_404(Image.objects.select_related("prompt"), pk=image_id, study=study)
    return _label_context(
        request,
        study,
        image=image,
        current=_own_label(study, request.user, image.pk),
        error=error,
        form_data={
            "request_id": request.POST.get("request_id", "")[:64],
            "shown_at": _int_param(request.POST.get("shown_at")),
            "reason": request.POST.get("reason", ""),
        },
    )


@guarded(methods=READ, check=_labeler)
def label_undo(request: HttpRequest, slug: str) -> HttpResponse:
    """Go back one: show the label given before the one on ``?before=ID`` (or the latest)."""
    study: Study = request.labeling_study
    before_id = _int_param(request.GET.get("before"))
    before = Image.objects.filter(pk=before_id, study=study).first() if before_id else None
    try:
        previous = services.annotation_previous(study=study, annotator=request.user, before=before)
    except NothingToUndo:
        if request.htmx:
            context = _label_context(request, study, image=before, notice=NOTHING_TO_UNDO_NOTICE)
            if before is None:
                context = _next_context(request, study, notice=NOTHING_TO_UNDO_NOTICE)
            else:
                context["current"] = _own_label(study, request.user, before.pk)
            return _render_label(request, context)
        messages.info(request, NOTHING_TO_UNDO_NOTICE)
        url = reverse("annotate:label_study", kwargs={"slug": study.slug})
        return redirect(f"{url}?image={before.pk}" if before else url)
    if request.htmx:
        return _render_label(request, _label_context(request, study, image=previous.image, current=previous))
    url = reverse("annotate:label_study", kwargs={"slug": study.slug})
    return redirect(f"{url}?image={previous.image_id}")


# --- Disputes (researchers) -------------------------------------------------------------------


@guarded(methods=READ, check=_researcher)
def disputes(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    study = _choose_study(request, slug, "annotate:disputes")
    if isinstance(study, HttpResponse):
        return study
    page = Paginator(selectors.dispute_queue(study=study), 50).get_page(request.GET.get("page"))
    return render(request, "annotate/disputes.html", {"study": study, "page": page})


@guarded(methods=READ + WRITE, check=_researcher)
def dispute(request: HttpRequest, image_id: int) -> HttpResponse:
    """One disputed image: both labels and who gave them; the researcher sets the final label
    (one key per label, U for "cannot agree"), then goes on to the next dispute."""
    image = get_object_or_404(Image.objects.select_related("study", "prompt"), pk=image_id)
    study = image.study
    error = ""
    form = DisputeResolveForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            try:
                final = _resolve(image, request.user, form.cleaned_data)
            except AnnotateError as exc:
                error = str(exc)
            else:
                messages.success(request, f"{image.source_path}: final label {final.value}.")
                following = selectors.dispute_queue(study=study).first()
                if following is not None:
                    return redirect("annotate:dispute", image_id=following.pk)
                return redirect("annotate:disputes", slug=study.slug)
        else:
            error = " ".join(form.non_field_errors()) or "Check the form."
    context = {
        "study": study,
        "detail": _detail(image),
        "labels": _label_keys(study),
        "unresolvable": study.label_spec(study.unresolvable_label) or {"name": study.unresolvable_label},
        "note": request.POST.get("note", ""),
        "error": error,
    }
    return render(request, "annotate/dispute.html", context, status=400 if error else 200)


def _detail(image: Image) -> dict[str, Any]:
    """``selectors.image_detail`` plus each label's time in seconds, for display."""
    detail = selectors.image_detail(image=image)
    for label in detail["labels"]:
        ms = label.get("duration_ms")
        label["seconds"] = None if ms is None else ms / 1000
    return detail


def _resolve(image: Image, researcher: Any, data: dict[str, Any]) -> Any:
    if data["unresolvable"]:
        return services.dispute_resolve_unresolvable(image=image, researcher=researcher, note=data["note"])
    return services.dispute_resolve(
        image=image, researcher=researcher, value=data["value"], note=data["note"]
    )


# --- Images (researchers) ---------------------------------------------------------------------


def _study_choices(study: Study) -> tuple[list[str], list[str]]:
    models = list(study.images.order_by().values_list("t2i_model", flat=True).distinct())
    categories = list(study.prompts.order_by().values_list("category", flat=True).distinct())
    return sorted(models), sorted(categories)


@guarded(methods=READ, check=_researcher)
def images(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The study's images with their state, filterable by state, T2I model and category."""
    study = _choose_study(request, slug, "annotate:images")
    if isinstance(study, HttpResponse):
        return study
    t2i_models, categories = _study_choices(study)
    form = ImageFilterForm(request.GET or None, t2i_models=t2i_models, categories=categories)
    rows = selectors.images_with_state(study=study).select_related("prompt")
    if form.is_valid():
        if form.cleaned_data["state"]:
            rows = rows.filter(state=form.cleaned_data["state"])
        if form.cleaned_data["t2i_model"]:
            rows = rows.filter(t2i_model=form.cleaned_data["t2i_model"])
        if form.cleaned_data["category"]:
            rows = rows.filter(prompt__category=form.cleaned_data["category"])
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"study": study, "form": form, "page": page, "query": query.urlencode()}
    return render(request, "annotate/images.html", context)


@guarded(methods=READ, check=_researcher)
def image(request: HttpRequest, image_id: int) -> HttpResponse:
    """One image: prompt, labels and who gave them, final label, and the full history."""
    img = get_object_or_404(Image.objects.select_related("study", "prompt"), pk=image_id)
    detail = _detail(img)
    resolvable = detail["state"] in (ImageState.DISPUTED, ImageState.RESOLVED)
    return render(
        request, "annotate/image.html", {"study": img.study, "detail": detail, "resolvable": resolvable}
    )


# --- Agreement and annotator stats (researchers) ----------------------------------------------


@guarded(methods=READ, check=_researcher)
def agreement(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Cohen's kappa, observed agreement and the confusion matrix, overall and per T2I model,
    category and annotator pair; Fleiss' kappa and Krippendorff's alpha when N > 2."""
    # Imported here: the report module pulls in the metrics stack, which page loads of other
    # screens (and Django start-up) need not pay for.
    from reports.report import agreement_report

    study = _choose_study(request, slug, "annotate:agreement")
    if isinstance(study, HttpResponse):
        return study
    t2i_models, categories = _study_choices(study)
    form = AgreementFilterForm(request.GET or None, t2i_models=t2i_models, categories=categories)
    filters = {"t2i_model": None, "category": None}
    if form.is_valid():
        filters = {key: form.cleaned_data[key] or None for key in filters}
    report = agreement_report(study=study, **filters)
    context = {
        "study": study,
        "form": form,
        "report": report,
        "confusion_rows": _confusion_rows(report["labels"], report["confusion"]),
        "many_raters": max(study.labels_per_image, report.get("max_labels_per_image") or 0) > 2,
    }
    return render(request, "annotate/agreement.html", context)


def _confusion_rows(labels: list[str], matrix: list[list[int]]) -> list[dict[str, Any]]:
    """Rows of the confusion table: rater A's label, then one cell per rater B label."""
    return [
        {"label": label, "cells": [{"count": n, "diagonal": i == j} for j, n in enumerate(row)]}
        for i, (label, row) in enumerate(zip(labels, matrix, strict=True))
    ]


@guarded(methods=READ, check=_researcher)
def annotator_stats(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    study = _choose_study(request, slug, "annotate:annotator_stats")
    if isinstance(study, HttpResponse):
        return study
    stats = selectors.annotator_stats(study=study)
    return render(request, "annotate/annotator_stats.html", {"study": study, "stats": stats})


# --- Users without a role ---------------------------------------------------------------------


@guarded(methods=READ, check=_anyone)
def no_role(request: HttpRequest) -> HttpResponse:
    return render(request, "annotate/no_role.html")
