"""HTML screens of the human side.

Annotators: the labeling screen — every question of an item on one screen, submitted once (one
key per choice on single-question screens; a key per question and Enter on multi-question
screens), Z to go back. Researchers: disputes per (item, question), items with their state and
history, agreement per question, annotator stats.

Views check who may act, call ``annotate.services`` (writes) or ``annotate.selectors`` (reads)
and render. The labeling screen renders its ``label_region`` partial for htmx requests
(``request.htmx``) and the whole page otherwise, so it works without JavaScript too (plain
forms, post/redirect/get). Choices, keys and question texts come from the Question rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Prefetch, Q, prefetch_related_objects
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache

from accounts.selectors import password_set_days, password_set_path
from annotate import selectors, services
from annotate.agreement import agreement_report
from annotate.errors import (
    AlreadyResolved,
    AnnotateError,
    InvalidLabel,
    NotAssigned,
    NothingToUndo,
    StaleSubmit,
)
from annotate.forms import (
    AgreementFilterForm,
    AnnotatorsAddForm,
    DisputeResolveForm,
    ItemFilterForm,
    LabelSubmitForm,
    answer_field,
    reason_field,
)
from annotate.models import Assignment, FinalLabel, ItemState, Label
from metrics.coco_names import COCO_CLASS_NAMES
from studies import permissions
from studies import services as study_services
from studies.errors import DomainError, StaffRefused
from studies.models import ImageRole, Item, ItemImage, Question, QuestionKind, Study
from studies.permissions import guarded, researcher_only
from studies.selectors import (
    item_compared_values,
    item_images,
    item_questions,
    study_or_404,
    study_questions,
    with_images,
)
from studies.session import study_remember, study_remembered
from studies.typing import AuthenticatedHttpRequest

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

View = Callable[..., HttpResponse]
READ = ("GET", "HEAD")
WRITE = ("POST",)

ALREADY_RESOLVED_NOTICE = "This item was already resolved by a researcher; here is your next one."
SEAT_LOST_NOTICE = "Your reservation of that item expired and it went to someone else; here is your next one."
NOTHING_TO_UNDO_NOTICE = "There is no earlier label to go back to."
TEXT_KINDS = (QuestionKind.BOXES, QuestionKind.CLASSES)
# Sort orders of the items list: form value → ORDER BY.
ITEM_SORTS = {
    "id": ("id",),
    "-id": ("-id",),
    "key": ("key", "id"),
    "-key": ("-key", "id"),
    "state": ("state", "id"),
    "t2i_model": ("t2i_model", "id"),
    "category": ("prompt__category", "prompt__word", "id"),
}
GUIDELINES_SEEN = "annotate_guidelines_seen"
# The box check (``detectors`` command ``prepare_box_check``) puts the detector's boxes in the
# item's metadata under this key: [{"class", "confidence", "box": [x0, y0, x1, y1]}] in pixels.
BOXES_KEY = "boxes"
# More boxes than this in one posted form is not a box check but a malformed request.
MAX_POSTED_BOXES = 1000
STATE_LABELS = dict(ItemState.choices)

# --- Permissions ------------------------------------------------------------------------------


class LabelingRequest(AuthenticatedHttpRequest):
    """The request of a labeling view (a type only): ``guarded`` let a signed-in user through and
    ``_labeler`` kept the study in the URL, one the user annotates, on it."""

    labeling_study: Study


def _anyone(request: HttpRequest, **kwargs: Any) -> bool:
    return True


def _labeler(request: LabelingRequest, slug: str | None = None, **kwargs: Any) -> bool:
    """Annotators of the study in the URL; without one, anyone with the role or a study.

    A study the user does not label is "no such study for you" (404), whether it exists or not:
    the answer never tells an outsider which studies exist; the 404 page lists their own. The
    study found is kept on the request: the labeling views are on the hot path of every key
    press, so they do not look it up a second time."""
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


def _choose_study(request: HttpRequest, slug: str | None, url_name: str) -> Study | HttpResponse:
    """The study in the URL (path or ``?study=``), remembered as the current one; without one
    the current study (``studies.session``), the only study, or a page to pick one —
    ``?choose=1`` asks even when a study is remembered."""
    slug = slug or request.GET.get("study") or None
    if slug is not None:
        study = study_or_404(slug)
        study_remember(request, study)
        return study
    if "choose" not in request.GET:
        remembered = study_remembered(request)
        if remembered is not None:
            return remembered
    studies = list(Study.objects.order_by("name"))
    if len(studies) == 1:
        study_remember(request, studies[0])
        return studies[0]
    return render(request, "annotate/choose_study.html", {"studies": studies, "url_name": url_name})


def _images_view(item: Item) -> dict[str, Any]:
    """The item's images as the templates lay them out: a seed/edit ``pair`` side by side, or
    the one ``main`` image."""
    links = item_images(item)
    pair = ImageRole.INPUT in links and ImageRole.OUTPUT in links
    main = links.get(ImageRole.IMAGE) or links.get(ImageRole.OUTPUT) or links.get(ImageRole.INPUT)
    return {
        "pair": pair,
        "input": links.get(ImageRole.INPUT),
        "output": links.get(ImageRole.OUTPUT),
        "main": main,
        "all": list(links.values()),
    }


def _choice_rows(question: Question, chosen: str = "") -> list[dict[str, Any]]:
    return [
        {
            "value": choice["value"],
            "name": choice.get("name", choice["value"]),
            "key": str(choice.get("key", "")).lower(),
            "requires_reason": bool(choice.get("requires_reason")),
            "checked": choice["value"] == chosen,
            "is_default": choice["value"] == question.default_value,
        }
        for choice in question.choices
    ]


def item_boxes(item: Item | None) -> list[dict[str, Any]] | None:
    """The detector boxes the item carries for people to check (``metadata["boxes"]``), or None
    when it carries none (its box question is then answered as plain text)."""
    if item is None:
        return None
    boxes = (item.metadata or {}).get(BOXES_KEY)
    return boxes if isinstance(boxes, list) else None


def _box_rows(question: Question, boxes: list[dict[str, Any]], chosen: str) -> list[dict[str, Any]]:
    """One row per box: its number, class, confidence, radio field and the answer to show (the
    posted or stored answer at its position, none by default: a preselected answer would be
    confirmed without a look)."""
    given = chosen.split(",") if chosen else []
    field = answer_field(question.key)
    rows = []
    for index, box in enumerate(boxes):
        answer = given[index].strip() if index < len(given) else ""
        rows.append(
            {
                "index": index,
                "number": index + 1,
                "class": str(box.get("class", "")),
                "confidence": box.get("confidence"),
                "field": f"{field}_{index}",
                "answer": answer,
                "choices": _choice_rows(question, answer),
            }
        )
    return rows


def _question_rows(
    questions: Iterable[Question],
    answers: Mapping[str, str],
    reasons: Mapping[str, str],
    boxes: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The questions as the labeling screen draws them, with the answers to show selected: the
    annotator's (current or just posted), else the question's default. With the item's
    ``boxes``, a box question is a yes/no per box and a class question suggests COCO names."""
    rows = []
    for question in questions:
        chosen = answers.get(question.key, question.default_value)
        choices = _choice_rows(question, chosen)
        box_check = question.kind == QuestionKind.BOXES and boxes is not None
        rows.append(
            {
                "key": question.key,
                "text": question.text,
                "kind": question.kind,
                "hotkey": question.hotkey.lower(),
                "field": answer_field(question.key),
                "reason_field": reason_field(question.key),
                "choices": choices,
                "value": chosen,
                "display": question.display(chosen) if chosen else "",
                "reason": reasons.get(question.key, ""),
                "is_text": question.kind in TEXT_KINDS and not box_check,
                "needs_reason": [c["name"] for c in choices if c["requires_reason"]],
                "box_check": box_check,
                "boxes": _box_rows(question, boxes, chosen) if box_check and boxes is not None else [],
                "class_names": COCO_CLASS_NAMES if question.kind == QuestionKind.CLASSES else (),
            }
        )
    return rows


# How the box captions are laid out: a caption is its number and class in bold ("3 dining
# table"), about CAPTION_EM font sizes wide per character, its ink CAPTION_ASCENT above the
# baseline and CAPTION_DESCENT below; on a phone (boxes.css) it is PHONE_CAPTION_SCALE times
# larger. Captions are placed at the phone's size, so no two overlap there, nor at the smaller
# size of a wider screen (a caption grows from its baseline's left end).
CAPTION_EM = 0.65
CAPTION_ASCENT = 0.95
CAPTION_DESCENT = 0.3
PHONE_CAPTION_SCALE = 1.6
# Past this many boxes (a crowd) captions simply go above their boxes: placing each apart from
# all the others costs boxes squared times the places tried, on every key press's render.
CAPTIONS_PLACED_APART = 50


def _caption_ys(y0: float, y1: float, ascent: float, descent: float, height: int) -> list[float]:
    """Baselines to try for the caption of a box from ``y0`` to ``y1``, best first: above the
    box, inside its top, below it, inside its bottom — then every line of the image from the top."""
    gap = descent * 0.3
    tried = [y0 - descent - gap, y0 + ascent + gap, y1 + ascent + gap, y1 - descent - gap]
    step = (ascent + descent) / 2
    tried += [ascent + n * step for n in range(int(max(0.0, height - ascent - descent) / step) + 1)]
    return tried


def _captions_place(
    boxes: list[tuple[float, float, float, float, str]], *, width: int, height: int, font: int
) -> list[tuple[float, float]]:
    """The (x, baseline y) of each box's caption, in the image's pixels: on the image, and no two
    overlapping at the phone's caption size; a caption that finds no free place (or comes after
    the first ``CAPTIONS_PLACED_APART``) goes above its box."""
    scale = font * PHONE_CAPTION_SCALE
    ascent, descent = CAPTION_ASCENT * scale, CAPTION_DESCENT * scale
    placed: list[tuple[float, float, float, float]] = []
    positions = []
    for n, (x0, y0, _x1, y1, text) in enumerate(boxes):
        wide = len(text) * CAPTION_EM * scale
        x = min(max(0.0, x0), max(0.0, width - wide))
        ys = _caption_ys(y0, y1, ascent, descent, height) if n < CAPTIONS_PLACED_APART else [y0 - descent]
        chosen = None
        for y in ys:
            rect = (x, y - ascent, x + wide, y + descent)
            on_image = rect[1] >= 0 and rect[3] <= height
            free = all(
                rect[2] <= r[0] or r[2] <= rect[0] or rect[3] <= r[1] or r[3] <= rect[1] for r in placed
            )
            if on_image and free:
                chosen = y
                break
        y = chosen if chosen is not None else max(ascent, ys[0])
        placed.append((x, y - ascent, x + wide, y + descent))
        positions.append((round(x, 2), round(y, 2)))
    return positions


def _overlay(
    item: Item, image: ItemImage | None, boxes: list[dict[str, Any]] | None
) -> dict[str, Any] | None:
    """The boxes drawn over the image, in its pixel coordinates (an SVG whose viewBox is the
    image's size scales with it), captions sized to the image and placed apart; None without
    boxes."""
    if image is None or boxes is None:
        return None
    width, height = image.image.width, image.image.height
    font = max(1, round(max(width, height) / 30))
    shapes: list[dict[str, Any]] = []
    for index, box in enumerate(boxes):
        try:
            x0, y0, x1, y1 = (float(v) for v in box["box"])
        except (KeyError, TypeError, ValueError):
            continue  # not drawable; its row still asks about it
        shapes.append(
            {
                "index": index,
                "number": index + 1,
                "class": str(box.get("class", "")),
                "x": round(x0, 2),
                "y": round(y0, 2),
                "width": round(x1 - x0, 2),
                "height": round(y1 - y0, 2),
            }
        )
    captions = _captions_place(
        [
            (s["x"], s["y"], s["x"] + s["width"], s["y"] + s["height"], f"{s['number']} {s['class']}")
            for s in shapes
        ],
        width=width,
        height=height,
        font=font,
    )
    for shape, (label_x, label_y) in zip(shapes, captions, strict=True):
        shape["label_x"], shape["label_y"] = label_x, label_y
    return {"width": width, "height": height, "font": font, "boxes": shapes}


# --- Labeling (annotators) --------------------------------------------------------------------
# Every labeling view is wrapped in never_cache (Cache-Control: no-store among others): a page
# that the Back button or a proxy brings back from a cache is a stale form, and a stale form is
# how an annotator ends up labelling an item twice.


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
    """What the label region shows. A re-shown item keeps its request id and start time, so
    a corrected submit is still one submit and its duration counts from the first showing.
    ``progress`` is the key press's own count (read in its transaction); without it, read now."""
    form_data = form_data or {}
    questions = item_questions(item, study_questions(study)) if item is not None else []
    boxes = item_boxes(item) if any(q.kind == QuestionKind.BOXES for q in questions) else None
    rows = _question_rows(questions, answers or {}, reasons or {}, boxes)
    single = len(rows) == 1 and rows[0]["kind"] == QuestionKind.CHOICE
    images = _images_view(item) if item is not None else None
    return {
        "study": study,
        "item": item,
        "images": images,
        "overlay": _overlay(item, images["main"], boxes) if item is not None and images else None,
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
    """The label region alone for htmx, the whole page otherwise — with the guidelines, open on
    the annotator's first visit to the study (remembered in the session)."""
    if not request.htmx:
        seen = request.session.get(GUIDELINES_SEEN, [])
        study: Study = context["study"]
        context = {
            **context,
            "guidelines_open": study.pk not in seen,
            "keys": _study_keys(study),
        }
        if study.pk not in seen:
            request.session[GUIDELINES_SEEN] = [*seen, study.pk]
        return render(request, "annotate/label.html", context, status=status)
    # The partial is rendered on every key press: it needs only the CSRF token, not the
    # context processors (whose role lookup costs a query) that the full page's header uses.
    html = render_to_string("annotate/label.html#label_region", {**context, "csrf_token": get_token(request)})
    return HttpResponse(html, status=status)


def _study_keys(study: Study) -> list[dict[str, Any]]:
    """Every key of the study's labeling screen, for the guidelines box."""
    questions = study_questions(study)
    keys: list[dict[str, Any]] = []
    single = len(questions) == 1 and questions[0].kind == QuestionKind.CHOICE
    for question in questions:
        if question.kind == QuestionKind.TOGGLE and question.hotkey:
            names = " / ".join(c.get("name", c["value"]) for c in question.choices)
            keys.append({"key": question.hotkey, "what": f"{question.text} ({names}; switches)"})
        elif question.kind == QuestionKind.BOXES:
            for choice in question.choices:
                if choice.get("key"):
                    what = choice.get("name", choice["value"])
                    keys.append(
                        {"key": choice["key"], "what": f"The highlighted box: {what}; on to the next box"}
                    )
            keys.append({"key": "← →", "what": "Highlight the previous / next box"})
        elif question.kind == QuestionKind.CLASSES:
            keys.append({"key": "/", "what": f"Type in “{question.text}” (Esc leaves the field)"})
        elif question.kind == QuestionKind.CHOICE:
            for choice in question.choices:
                if choice.get("key"):
                    what = choice.get("name", choice["value"])
                    if choice.get("requires_reason"):
                        what += " (asks for a reason)"
                    keys.append({"key": choice["key"], "what": what if single else f"{question.key}: {what}"})
    if not single:
        keys.append({"key": "Enter", "what": "Save the answers and go to the next item"})
    keys.append({"key": "z", "what": "Go back one item to change your answers"})
    # The zoom keys (zoom.js) give way to a study's own answer keys: list only the free ones.
    taken = {str(k["key"]).lower() for k in keys} | {
        str(c.get("key", "")).lower() for q in questions for c in q.choices
    }
    zoom_keys = (
        ("+", "Zoom in: fit → 100 % → 200 % (drag or Shift+arrows to look around)"),
        ("-", "Zoom out"),
        ("0", "Fit the image to the screen again"),
    )
    for key, what in zoom_keys:
        if key not in taken:
            keys.append({"key": key, "what": what})
    return keys


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
    prefetch_related_objects([item], Prefetch("item_images", queryset=_item_images_queryset()))
    return item, labels


def _item_images_queryset() -> Any:
    return ItemImage.objects.select_related("image").order_by("role")


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
    """Save the answers to every question of one item and move on. Errors re-show the same
    item with the message; a stale form (the item was labelled already, and this is not an
    explicit change) changes nothing and says so.

    The key press saves the labels and claims the next item in one transaction
    (``annotation_submit_next``); the item is looked up only on the rare error paths."""
    study: Study = request.labeling_study
    questions = study_questions(study)
    posted, box_error = _with_box_answers(request.POST, questions)
    if box_error:
        return _render_label(request, _same_item(request, study, item_id, box_error, posted), status=400)
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


def _with_box_answers(post: QueryDict, questions: list[Question]) -> tuple[QueryDict, str]:
    """The posted form with each box-check question's per-box radios (``answer_<key>_<i>``,
    ``answer_<key>_n`` boxes) joined into its one answer, ``answer_<key>`` = "yes,no,…" in box
    order; and an error for a person when a box has no answer. A form that posts the answer
    itself (a script, the plain text field) is left as it is."""
    data = post.copy()
    error = ""
    for question in questions:
        field = answer_field(question.key)
        raw_n = post.get(f"{field}_n")
        if question.kind != QuestionKind.BOXES or raw_n is None or field in post:
            continue
        n = _int_param(raw_n)
        if n is None or not 0 <= n <= MAX_POSTED_BOXES:
            error = error or f"The form sent an impossible number of boxes ({raw_n[:20]!r}); reload the page."
            continue
        parts = [post.get(f"{field}_{index}", "").strip() for index in range(n)]
        unanswered = [index + 1 for index, part in enumerate(parts) if not part]
        if unanswered and not error:
            keys = " or ".join(str(c.get("key", c["value"])).upper() for c in question.choices)
            error = (
                f"Box {unanswered[0]} has no answer yet ({len(unanswered)} of {n} unanswered): "
                f"press {keys} for each box."
            )
        data[field] = ",".join(parts)
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


# --- Disputes (researchers) -------------------------------------------------------------------


@researcher_only(methods=READ)
def disputes(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Every disputed (item, question) with its conflicting labels and "n of m"."""
    study = _choose_study(request, slug, "annotate:disputes")
    if isinstance(study, HttpResponse):
        return study
    # Paginated on plain (item, question) ids; only the page's items are read in full.
    page = Paginator(selectors.dispute_pairs(study=study), 50).get_page(request.GET.get("page"))
    shown = set(page.object_list)
    rows = selectors.dispute_queue(study=study, item_ids=sorted({item_id for item_id, _ in shown}))
    drawn: Any = [_dispute_row(row) for row in rows if (row.item.pk, row.question.pk) in shown]
    page.object_list = drawn  # the page's rows, in place of their ids
    return render(request, "annotate/disputes.html", {"study": study, "page": page})


def _dispute_row(row: selectors.DisputeRow) -> dict[str, Any]:
    question = row.question
    return {
        "item": row.item,
        "images": _images_view(row.item),
        "question": question,
        "labels": [
            {"annotator": username, "display": question.display(value), "reason": reason}
            for username, value, reason in row.labels
        ],
        "n_labels": row.n_labels,
        "n_needed": row.n_needed,
    }


def _dispute_question(item: Item, key: str | None) -> Question:
    """The question a dispute page is about: the one named, else the item's first disputed
    question, else its first question."""
    questions = item_questions(item, study_questions(item.study))
    if not questions:
        raise Http404("This item asks no question.")
    if key:
        for question in questions:
            if question.key == key:
                return question
        raise Http404(f"Item {item.key} does not ask the question “{key}”.")
    states = selectors.item_question_states(item)
    for question in questions:
        if states.get(question.key) == ItemState.DISPUTED:
            return question
    return questions[0]


@researcher_only(methods=READ + WRITE)
def dispute(request: HttpRequest, item_id: int, question: str | None = None) -> HttpResponse:
    """One disputed (item, question): the labels and who gave them; the researcher sets the
    final answer (one key per choice, U for "cannot agree"), then goes on to the next dispute."""
    item = get_object_or_404(Item.objects.select_related("study", "prompt"), pk=item_id)
    study = item.study
    study_remember(request, study)
    key = question or request.POST.get("question") or request.GET.get("question")
    asked = _dispute_question(item, key)
    error = ""
    form = DisputeResolveForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            try:
                final = _resolve(item, asked, request.user, form.cleaned_data)
            except AnnotateError as exc:
                error = str(exc)
            else:
                messages.success(
                    request, f"{item.key} · {asked.key}: final answer {asked.display(final.value)}."
                )
                following = selectors.dispute_queue(study=study, limit=1)
                if following:
                    nxt = following[0]
                    return redirect(
                        "annotate:dispute_question", item_id=nxt.item.pk, question=nxt.question.key
                    )
                return redirect("annotate:disputes", slug=study.slug)
        else:
            error = " ".join(str(err) for err in form.non_field_errors()) or "Check the form."
    detail = _detail(item)
    context = {
        "study": study,
        "detail": detail,
        "images": _images_view(item),
        "question": asked,
        "section": next(s for s in detail["questions"] if s["question"].pk == asked.pk),
        "choices": _choice_rows(asked),
        "is_text": asked.kind in TEXT_KINDS,
        "unresolvable": (
            {"value": asked.unresolvable_value, "name": asked.display(asked.unresolvable_value)}
            if asked.unresolvable_value
            else None
        ),
        "note": request.POST.get("note", ""),
        "error": error,
    }
    return render(request, "annotate/dispute.html", context, status=400 if error else 200)


def _detail(item: Item) -> dict[str, Any]:
    """``selectors.item_detail`` plus each label's time in seconds, and one history of labels
    and final labels in time order (oldest first), for display."""
    detail = selectors.item_detail(item=item)
    detail["compared"] = item_compared_values(item)
    detail["state_label"] = STATE_LABELS.get(detail["state"], detail["state"])
    for section in detail["questions"]:
        section["state_label"] = STATE_LABELS.get(section["state"], section["state"])
        for label in section["labels"]:
            ms = label.get("duration_ms")
            label["seconds"] = None if ms is None else ms / 1000
    history = [
        {"when": rev["changed_at"], "what": f"label of {rev['annotator']}", "who": rev["changed_by"], **rev}
        for rev in detail["label_history"]
    ] + [
        {
            "when": rev["decided_at"],
            "what": f"final answer ({rev['source']})"
            if rev["value"]
            else f"{rev['source']} final answer removed",
            "who": rev["decided_by"] or "",
            "reason": rev["note"],
            **rev,
        }
        for rev in detail["final_label_history"]
    ]
    detail["history"] = sorted(history, key=lambda row: row["when"])
    return detail


def _resolve(item: Item, question: Question, researcher: Any, data: dict[str, Any]) -> FinalLabel:
    if data["unresolvable"]:
        return services.dispute_resolve_unresolvable(
            item=item, question=question, researcher=researcher, note=data["note"]
        )
    return services.dispute_resolve(
        item=item, question=question, researcher=researcher, value=data["value"], note=data["note"]
    )


# --- Items (researchers) ----------------------------------------------------------------------


def _study_choices(study: Study) -> tuple[list[str], list[str]]:
    models = study.items.order_by().values_list("t2i_model", flat=True).distinct()
    categories = study.prompts.order_by().values_list("category", flat=True).distinct()
    return sorted(m for m in models if m), sorted(c for c in categories if c)


class _ItemListFields(selectors.ItemStateFields):
    finals: list[dict[str, str]]
    images_view: dict[str, Any]
    state_label: str
    n_asked: int


@researcher_only(methods=READ)
def images(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The study's items with their state: filter by state, T2I model and category, search the
    key and prompt text, sort."""
    study = _choose_study(request, slug, "annotate:images")
    if isinstance(study, HttpResponse):
        return study
    t2i_models, categories = _study_choices(study)
    form = ItemFilterForm(request.GET or None, t2i_models=t2i_models, categories=categories)
    rows = selectors.items_with_state(study=study).select_related("prompt")
    order: tuple[str, ...] = ITEM_SORTS["id"]
    if form.is_valid():
        data = form.cleaned_data
        if data["state"]:
            rows = rows.filter(state=data["state"])
        if data["t2i_model"]:
            rows = rows.filter(t2i_model=data["t2i_model"])
        if data["category"]:
            rows = rows.filter(prompt__category=data["category"])
        if data["q"]:
            rows = rows.filter(Q(key__icontains=data["q"]) | Q(prompt__text__icontains=data["q"]))
        order = ITEM_SORTS.get(data["sort"] or "id", order)
    rows = with_images(rows.order_by(*order)).prefetch_related("final_labels")
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    questions = study_questions(study)
    by_id = {question.pk: question for question in questions}
    for row in page.object_list:
        # The attributes the template reads besides the model's and the state's, set here.
        item = cast("WithAnnotations[Item, _ItemListFields]", row)
        item.finals = [
            {
                "question": by_id[final.question_id].key,
                "display": by_id[final.question_id].display(final.value),
            }
            for final in sorted(item.final_labels.all(), key=lambda f: by_id[f.question_id].position)
            if final.question_id in by_id
        ]
        item.images_view = _images_view(item)
        item.state_label = STATE_LABELS.get(item.state, item.state)
        item.n_asked = len(item_questions(item, questions))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "study": study,
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "n_questions": len(questions),
    }
    return render(request, "annotate/images.html", context)


@researcher_only(methods=READ)
def image(request: HttpRequest, item_id: int) -> HttpResponse:
    """One item: its images by role, and per question the labels and who gave them, the final
    answer, and the whole history in time order."""
    item = get_object_or_404(Item.objects.select_related("study", "prompt"), pk=item_id)
    study_remember(request, item.study)
    detail = _detail(item)
    resolvable = {ItemState.DISPUTED, ItemState.RESOLVED}
    for section in detail["questions"]:
        section["resolvable"] = section["state"] in resolvable
    context = {"study": item.study, "detail": detail, "images": _images_view(item)}
    return render(request, "annotate/image.html", context)


# --- Agreement and annotator stats (researchers) ----------------------------------------------


@researcher_only(methods=READ)
def agreement(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Per question: Cohen's kappa, observed agreement and the confusion matrix, overall and per
    T2I model, category and annotator pair; Fleiss' kappa and Krippendorff's alpha when N > 2."""
    study = _choose_study(request, slug, "annotate:agreement")
    if isinstance(study, HttpResponse):
        return study
    questions = study_questions(study)
    t2i_models, categories = _study_choices(study)
    form = AgreementFilterForm(
        request.GET or None, questions=questions, t2i_models=t2i_models, categories=categories
    )
    filters: dict[str, str | None] = {"t2i_model": None, "category": None}
    chosen = ""
    if form.is_valid():
        filters = {key: form.cleaned_data[key] or None for key in filters}
        chosen = form.cleaned_data["question"]
    if not questions:
        raise Http404("This study has no questions.")
    question = next((q for q in questions if q.key == chosen), questions[0])
    report = agreement_report(study=study, question=question, **filters)
    overview = []
    if len(questions) > 1:
        overview = [
            {
                "question": q,
                "report": report if q == question else agreement_report(study=study, question=q, **filters),
            }
            for q in questions
        ]
    context = {
        "study": study,
        "form": form,
        "question": question,
        "report": report,
        "overview": overview,
        "confusion_rows": _confusion_rows(report["label_names"], report["confusion"]),
        "many_raters": max(study.labels_per_item, report["max_labels_per_item"] or 0) > 2,
    }
    return render(request, "annotate/agreement.html", context)


def _confusion_rows(labels: list[str], matrix: list[list[int]]) -> list[dict[str, Any]]:
    """Rows of the confusion table: rater A's answer, then one cell per rater B answer."""
    return [
        {"label": label, "cells": [{"count": n, "diagonal": i == j} for j, n in enumerate(row)]}
        for i, (label, row) in enumerate(zip(labels, matrix, strict=True))
    ]


@researcher_only(methods=READ)
def annotator_stats(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    study = _choose_study(request, slug, "annotate:annotator_stats")
    if isinstance(study, HttpResponse):
        return study
    stats = selectors.annotator_stats(study=study)
    context = {"study": study, "stats": stats, "team_form": AnnotatorsAddForm()}
    return render(request, "annotate/annotator_stats.html", context)


@never_cache
@researcher_only(methods=WRITE)
def annotators_add(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The annotators page's form: ``study_services.annotators_add``, then each new account's
    one-time link to set its password, shown in this answer only (htmx: the form's region)."""
    study = study_or_404(slug)
    form = AnnotatorsAddForm(request.POST)
    context: dict[str, Any] = {"study": study, "team_form": form, "team_error": ""}
    if not form.is_valid():
        context["team_error"] = "Name at least one username (at most 20,000 characters in all)."
    else:
        try:
            done = study_services.annotators_add(
                study=study, usernames=form.names(), allow_staff=form.cleaned_data["allow_staff"]
            )
        except StaffRefused as exc:
            context["team_error"] = f"{exc} (tick “Also researchers and admins” to add them)"
        except DomainError as exc:
            context["team_error"] = str(exc)
        else:
            context["team_done"] = {
                "created": [
                    (u.get_username(), request.build_absolute_uri(password_set_path(u))) for u in done.created
                ],
                "added": [u.get_username() for u in done.added],
                "unchanged": list(done.unchanged),
                "days": password_set_days(),
            }
            context["team_form"] = AnnotatorsAddForm()
    status = 400 if context["team_error"] else 200
    if request.htmx:
        return render(request, "annotate/annotator_stats.html#team_form", context, status=status)
    context |= {"stats": selectors.annotator_stats(study=study), "section": "annotator_stats"}
    return render(request, "annotate/annotator_stats.html", context, status=status)


# --- Users without a role ---------------------------------------------------------------------


@guarded(methods=READ, check=_anyone)
def no_role(request: HttpRequest) -> HttpResponse:
    return render(request, "annotate/no_role.html")
