"""The labeling screen (annotators): every question of an item on one screen, submitted once, Z to
go back. htmx requests get the ``label_region`` partial, others the whole page (post/redirect/get)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, QueryDict
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache

from annotate import selectors, services
from annotate.errors import AlreadyResolved, InvalidLabel, NotAssigned, NothingToUndo, StaleSubmit
from annotate.forms import LabelSubmitForm, answer_field
from annotate.models import Assignment, Label
from annotate.views.common import READ, WRITE, images_view
from annotate.views.screen import image_overlay, question_rows, study_keys, study_scripts
from studies import permissions
from studies.kinds import kind_of
from studies.models import Item, Question, Study
from studies.permissions import guarded
from studies.selectors import images_load, item_images, item_questions, study_questions, with_images
from studies.typing import AuthenticatedHttpRequest

ALREADY_RESOLVED_NOTICE = "This item was already resolved by a researcher; here is your next one."
SEAT_LOST_NOTICE = "Your reservation of that item expired and it went to someone else; here is your next one."
NOTHING_TO_UNDO_NOTICE = "There is no earlier label to go back to."
GUIDELINES_SEEN = "annotate_guidelines_seen"


# --- Permissions ------------------------------------------------------------------------------


class LabelingRequest(AuthenticatedHttpRequest):
    """The request of a labeling view (a type only): ``guarded`` let a signed-in user through and
    ``_labeler`` kept the study in the URL, one the user annotates, on it."""

    labeling_study: Study
    labeling_done: bool  # set by _render_label: the screen shows no item to label


def _labeler(request: LabelingRequest, slug: str | None = None, **kwargs: Any) -> bool:
    """Annotators of the study in the URL (kept on the request; any other study is a 404, whether
    it exists or not); without one, anyone with the role or a study."""
    if slug is not None:
        study = selectors.study_for_labeling(user=request.user, slug=slug)
        if study is None:
            raise Http404(f"There is no study {slug!r} for you to label.")
        request.labeling_study = study
        return True
    return (
        permissions.is_annotator(request.user) or selectors.studies_for_annotator(user=request.user).exists()
    )


# --- Small helpers ----------------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _int_param(raw: str | None) -> int | None:
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


# --- Labeling (annotators) --------------------------------------------------------------------
# Every labeling view is never_cache (docs/explanation/model.md).


def _label_context(
    request: LabelingRequest,
    study: Study,
    *,
    item: Item | None,
    next_items: Iterable[Item] = (),
    answers: Mapping[str, str] | None = None,
    reasons: Mapping[str, str] | None = None,
    revisit: bool = False,
    seen_revision: int | None = None,
    error: str = "",
    notice: str = "",
    stale: bool = False,
    form_data: Mapping[str, Any] | None = None,
    progress: selectors.Progress | None = None,
) -> dict[str, Any]:
    """What the label region shows; a re-shown item keeps its request id and start time.
    ``progress``: the key press's own count (read in its transaction); without it, read now."""
    form_data = form_data or {}
    questions = item_questions(item, study_questions(study)) if item is not None else []
    rows = question_rows(questions, answers or {}, reasons or {}, item)
    single = len(questions) == 1 and kind_of(questions[0]).one_key
    images = images_view(item) if item is not None else None
    return {
        "study": study,
        "item": item,
        "images": images,
        "overlay": image_overlay(questions, item, images["main"]) if item is not None and images else None,
        "questions": rows,
        "layout": "single" if single else "multi",
        "preload": [link.image.url for nxt in next_items for link in item_images(nxt).values()],
        "progress": progress or selectors.annotator_progress(study=study, annotator=request.user),
        "request_id": form_data.get("request_id") or uuid.uuid4().hex,
        "shown_at": form_data.get("shown_at") or _now_ms(),
        "revisit": revisit,
        "seen_revision": seen_revision,
        "error": error,
        "notice": notice,
        "stale": stale,
    }


def _render_label(request: LabelingRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """The label region alone for htmx, else the whole page (guidelines open on the first visit).
    Sets ``request.labeling_done`` when it shows no item to label."""
    request.labeling_done = context["item"] is None and not context["stale"]
    if not request.htmx:
        seen = request.session.get(GUIDELINES_SEEN, [])
        study: Study = context["study"]
        context = {
            **context,
            "guidelines_open": study.pk not in seen,
            "keys": study_keys(study),
            **study_scripts(study_questions(study)),
        }
        if study.pk not in seen:
            request.session[GUIDELINES_SEEN] = [*seen, study.pk]
        return render(request, "annotate/label.html", context, status=status)
    # The partial is rendered on every key press: it needs only the request and the CSRF token,
    # not the context processors (whose role lookup costs a query) that the full page's header uses.
    html = render_to_string(
        "annotate/label.html#label_region", {**context, "request": request, "csrf_token": get_token(request)}
    )
    return HttpResponse(html, status=status)


def _queue_context(
    request: LabelingRequest,
    study: Study,
    queue: list[Assignment],
    *,
    notice: str = "",
    progress: selectors.Progress | None = None,
) -> dict[str, Any]:
    return _label_context(
        request,
        study,
        item=queue[0].item if queue else None,
        next_items=[seat.item for seat in queue[1:]],
        notice=notice,
        progress=progress,
    )


def _next_context(request: LabelingRequest, study: Study, *, notice: str = "") -> dict[str, Any]:
    """The head of the annotator's queue, with the item after it to preload."""
    queue = services.assignment_queue(study=study, annotator=request.user, size=2, gold=True)
    return _queue_context(request, study, queue, notice=notice)


def _own_answers(study: Study, user: Any, item_id: int | None) -> tuple[Item, list[Label]] | None:
    """The item (of this study) and the annotator's labels on it; None when they have none."""
    if item_id is None:
        return None
    labels = list(
        Label.objects.filter(item_id=item_id, item__study=study, annotator=user).select_related(
            "item__prompt"
        )
    )
    if not labels:
        return None
    item = labels[0].item
    item.study = study
    images_load([item])
    return item, labels


def _revisit_context(
    request: LabelingRequest, study: Study, item_id: int | None, *, notice: str = ""
) -> dict[str, Any] | None:
    """The item the annotator labelled before, with their current answers drawn into a change
    form (``change`` and the ``seen_revision`` stamp of their labels); None if they have none."""
    found = _own_answers(study, request.user, item_id)
    if found is None:
        return None
    item, labels = found
    by_id = {question.pk: question for question in study_questions(study)}
    answers = {by_id[label.question_id].key: label.value for label in labels if label.question_id in by_id}
    reasons = {by_id[label.question_id].key: label.reason for label in labels if label.question_id in by_id}
    return _label_context(
        request,
        study,
        item=item,
        answers=answers,
        reasons=reasons,
        revisit=True,
        seen_revision=services.label_revision_stamp(item=item, annotator=request.user),
        notice=notice,
    )


def _after_label(request: LabelingRequest, study: Study, notice: str = "") -> HttpResponse:
    """Post/redirect/get for plain forms; the next item's partial at once for JavaScript."""
    if request.htmx:
        return _render_label(request, _next_context(request, study, notice=notice))
    if notice:
        messages.warning(request, notice)
    return redirect("annotate:label_study", slug=study.slug)


@never_cache
@guarded(methods=READ, check=_labeler)
def label(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Straight into the annotator's only study, or a list of their studies to pick from."""
    studies = list(selectors.studies_for_annotator(user=request.user))
    if len(studies) == 1:
        return redirect("annotate:label_study", slug=studies[0].slug)
    return render(
        request, "annotate/choose_study.html", {"studies": studies, "url_name": "annotate:label_study"}
    )


@never_cache
@guarded(methods=READ, check=_labeler)
def label_study(request: LabelingRequest, slug: str) -> HttpResponse:
    """The labeling screen: the next item, or (``?item=ID``) one the annotator labelled
    before, with their answers, to change them."""
    study: Study = request.labeling_study
    item_id = _int_param(request.GET.get("item") or request.GET.get("image"))
    context = _revisit_context(request, study, item_id)
    if context is None:
        try:
            context = _next_context(request, study)
        except NotAssigned as exc:
            raise PermissionDenied(str(exc)) from exc
    return _render_label(request, context)


@never_cache
@guarded(methods=WRITE, check=_labeler)
def label_submit(request: LabelingRequest, slug: str, item_id: int) -> HttpResponse:
    """The key press: save the answers to every question of one item and claim the next in one
    transaction. Errors re-show the same item with the message; a stale form changes nothing."""
    study: Study = request.labeling_study
    questions = study_questions(study)
    posted, kind_error = _with_kind_answers(request.POST, questions)
    if kind_error:
        return _render_label(request, _same_item(request, study, item_id, kind_error, posted), status=400)
    form = LabelSubmitForm(posted, questions=questions)
    if not form.is_valid():
        message = " ".join(str(err) for errors in form.errors.values() for err in errors)
        return _render_label(request, _same_item(request, study, item_id, message, posted), status=400)
    data = form.cleaned_data
    change = bool(data["change"])
    try:
        outcome = services.annotation_submit_next(
            study=study,
            annotator=request.user,
            item_id=item_id,
            answers=form.answers(),
            reasons=form.reasons(),
            duration_ms=form.duration(_now_ms()),
            request_id=data["request_id"],
            change=change,
            seen_revision=data["seen_revision"] if change else None,
        )
    except Item.DoesNotExist as exc:
        raise Http404("No such item in this study.") from exc
    except InvalidLabel as exc:
        return _render_label(request, _same_item(request, study, item_id, str(exc), posted), status=400)
    except StaleSubmit as exc:
        context = _label_context(request, study, item=None, error=str(exc), stale=True)
        return _render_label(request, context, status=409)
    except AlreadyResolved:
        return _after_label(request, study, notice=ALREADY_RESOLVED_NOTICE)
    except NotAssigned:
        return _after_label(request, study, notice=SEAT_LOST_NOTICE)
    if request.htmx:
        return _render_label(
            request, _queue_context(request, study, outcome.queue, progress=outcome.progress)
        )
    return _after_label(request, study)


def _with_kind_answers(post: QueryDict, questions: list[Question]) -> tuple[QueryDict, str]:
    """The posted form with each answer a kind joins from fields of its own (a box check's
    per-box radios) in its ``answer_<key>`` field; and the first error for a person."""
    data = post.copy()
    error = ""
    for question in questions:
        field = answer_field(question.key)
        value, problem = kind_of(question).posted(question, post, field)
        if value is not None:
            data[field] = value
        error = error or problem
    return data, error


def _same_item(
    request: LabelingRequest, study: Study, item_id: int, error: str, posted: QueryDict | None = None
) -> dict[str, Any]:
    """The item of a refused submit, re-shown with what was posted and the error."""
    items = with_images(Item.objects.select_related("prompt"))
    item = get_object_or_404(items, pk=item_id, study=study)
    item.study = study
    form = LabelSubmitForm(posted if posted is not None else request.POST, questions=study_questions(study))
    form.is_valid()  # the errors are in ``error`` already; the cleaned fields re-fill the form
    answers, reasons = form.answers(), form.reasons()
    change = request.POST.get("change") in ("1", "true", "on")
    return _label_context(
        request,
        study,
        item=item,
        answers=answers,
        reasons=reasons,
        revisit=change,
        seen_revision=_int_param(request.POST.get("seen_revision")) if change else None,
        error=error,
        form_data={
            "request_id": request.POST.get("request_id", "")[:64],
            "shown_at": _int_param(request.POST.get("shown_at")),
        },
    )


@never_cache
@guarded(methods=READ, check=_labeler)
def label_undo(request: LabelingRequest, slug: str) -> HttpResponse:
    """Go back one: show the item labelled before the one on ``?before=ID`` (or the latest)
    with the annotator's answers, as an explicit change form."""
    study: Study = request.labeling_study
    before_id = _int_param(request.GET.get("before"))
    before = Item.objects.filter(pk=before_id, study=study).first() if before_id else None
    url = reverse("annotate:label_study", kwargs={"slug": study.slug})
    try:
        previous = services.annotation_previous(study=study, annotator=request.user, before=before)
    except NothingToUndo:
        if request.htmx:
            context = _revisit_context(request, study, before_id, notice=NOTHING_TO_UNDO_NOTICE)
            if context is None:
                context = _next_context(request, study, notice=NOTHING_TO_UNDO_NOTICE)
            return _render_label(request, context)
        messages.info(request, NOTHING_TO_UNDO_NOTICE)
        return redirect(f"{url}?item={before.pk}" if before else url)
    if request.htmx:
        context = _revisit_context(request, study, previous.pk) or _next_context(request, study)
        return _render_label(request, context)
    return redirect(f"{url}?item={previous.pk}")
