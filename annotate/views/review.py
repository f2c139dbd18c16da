"""Researchers' review of the labels: disputes and their resolution, items, agreement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotate import selectors, services
from annotate.agreement import agreement_report
from annotate.errors import AnnotateError
from annotate.forms import ITEM_SORTS, AgreementFilterForm, DisputeResolveForm, ItemFilterForm
from annotate.models import ItemState
from annotate.views.common import READ, WRITE, choose_study, images_view
from annotate.views.screen import choice_rows
from studies.kinds import kind_of
from studies.models import Item, Question
from studies.permissions import researcher_only
from studies.selectors import item_compared_values, item_questions, study_questions, with_images
from studies.session import study_remember
from studies.typing import AuthenticatedHttpRequest

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


STATE_LABELS = dict(ItemState.choices)

# --- Disputes (researchers) -------------------------------------------------------------------


@researcher_only(methods=READ)
def disputes(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Every disputed (item, question) with its conflicting labels and "n of m"."""
    study = choose_study(request, slug, "annotate:disputes")
    if isinstance(study, HttpResponse):
        return study
    # Paginated on plain (item, question) ids; only the page's items are read in full.
    page = Paginator(selectors.dispute_pairs(study=study), 50).get_page(request.GET.get("page"))
    shown = set(page.object_list)
    rows = selectors.dispute_queue(study=study, item_ids=sorted({item_id for item_id, _ in shown}))
    drawn: Any = [
        {
            "item": row.item,
            "images": images_view(row.item),
            "question": row.question,
            "labels": [
                {"annotator": username, "display": row.question.display(value), "reason": reason}
                for username, value, reason in row.labels
            ],
            "n_labels": row.n_labels,
            "n_needed": row.n_needed,
        }
        for row in rows
        if (row.item.pk, row.question.pk) in shown
    ]
    page.object_list = drawn  # the page's rows, in place of their ids
    return render(request, "annotate/disputes.html", {"study": study, "page": page})


def _dispute_question(item: Item, key: str | None) -> Question:
    """The question a dispute page is about: the one named, else the first disputed, else the first."""
    questions = item_questions(item, study_questions(item.study))
    if not questions:
        raise Http404("This item asks no question.")
    if key:
        for question in questions:
            if question.key == key:
                return question
        raise Http404(f"Item {item.key} does not ask the question “{key}”.")
    states = selectors.item_question_states(item)
    return next((q for q in questions if states.get(q.key) == ItemState.DISPUTED), questions[0])


@researcher_only(methods=READ + WRITE)
def dispute(request: AuthenticatedHttpRequest, item_id: int, question: str | None = None) -> HttpResponse:
    """One disputed (item, question): its labels; the researcher sets the final answer."""
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
                data = form.cleaned_data
                final = services.dispute_resolve(
                    item=item,
                    question=asked,
                    researcher=request.user,
                    value=None if data["unresolvable"] else data["value"],
                    note=data["note"],
                )
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
        "images": images_view(item),
        "question": asked,
        "section": next(s for s in detail["questions"] if s["question"].pk == asked.pk),
        "choices": choice_rows(asked),
        "is_text": kind_of(asked).text_answer,
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
    """``selectors.item_detail`` for display, with one history in time order."""
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


# --- Items (researchers) ----------------------------------------------------------------------


class _ItemListFields(selectors.ItemStateFields):
    finals: list[dict[str, str]]
    images_view: dict[str, Any]
    state_label: str
    n_asked: int


@researcher_only(methods=READ)
def images(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The study's items with their state: filtered, searched, sorted."""
    study = choose_study(request, slug, "annotate:images")
    if isinstance(study, HttpResponse):
        return study
    form = ItemFilterForm(request.GET or None, study=study)
    filters = form.cleaned_data if form.is_valid() else {}
    rows = selectors.items_filtered(study=study, filters=filters).order_by(
        *ITEM_SORTS[filters.get("sort") or "id"][1]
    )
    rows = with_images(rows).prefetch_related("final_labels")
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
        item.images_view = images_view(item)
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
    """One item: its images, per question its labels and final answer, and its history."""
    item = get_object_or_404(Item.objects.select_related("study", "prompt"), pk=item_id)
    study_remember(request, item.study)
    detail = _detail(item)
    resolvable = {ItemState.DISPUTED, ItemState.RESOLVED}
    for section in detail["questions"]:
        section["resolvable"] = section["state"] in resolvable
    context = {"study": item.study, "detail": detail, "images": images_view(item)}
    return render(request, "annotate/image.html", context)


# --- Agreement (researchers) ------------------------------------------------------------------


@researcher_only(methods=READ)
def agreement(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Agreement per question, overall and per T2I model, category and annotator pair."""
    study = choose_study(request, slug, "annotate:agreement")
    if isinstance(study, HttpResponse):
        return study
    questions = study_questions(study)
    form = AgreementFilterForm(request.GET or None, study=study, questions=questions)
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
        # Rater A's answer, then one cell per rater B answer.
        "confusion_rows": [
            {"label": label, "cells": [{"count": n, "diagonal": i == j} for j, n in enumerate(row)]}
            for i, (label, row) in enumerate(zip(report["label_names"], report["confusion"], strict=True))
        ],
        "many_raters": max(study.labels_per_item, report["max_labels_per_item"] or 0) > 2,
    }
    return render(request, "annotate/agreement.html", context)
