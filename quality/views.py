"""The reliability page (researchers): every annotator's figures, sortable, as CSV, and the
one-click exclusion and re-inclusion of an annotator."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from quality import selectors, services
from quality.errors import QualityError
from studies.csvio import safe_writer
from studies.models import Item
from studies.permissions import researcher_only
from studies.selectors import study_or_404

#: The page's sortable columns: key, heading, the value sorted by.
COLUMNS: tuple[tuple[str, str, Callable[[selectors.AnnotatorReliability], Any]], ...] = (
    ("annotator", "Annotator", lambda r: r.username),
    ("labels", "Labels", lambda r: r.labels),
    ("median_seconds", "Median s / label", lambda r: r.median_seconds),
    ("gold_accuracy", "Gold accuracy", lambda r: r.gold.accuracy if r.gold else None),
    ("mean_kappa", "Mean κ", lambda r: r.mean_kappa),
    ("agreement_with_final", "Agreement with finals", lambda r: r.agreement_with_final),
    ("reliability", "Inferred reliability", lambda r: r.reliability),
)
_SORTS = {key: value for key, _, value in COLUMNS}


def sorted_rows(
    rows: list[selectors.AnnotatorReliability], sort: str
) -> list[selectors.AnnotatorReliability]:
    """By a column of ``COLUMNS`` (``-`` in front: descending); empty values last either way."""
    key = _SORTS.get(sort.lstrip("-"), _SORTS["annotator"])
    known = [row for row in rows if key(row) is not None]
    empty = [row for row in rows if key(row) is None]
    return sorted(known, key=key, reverse=sort.startswith("-")) + empty


@researcher_only()
def reliability(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_or_404(slug)
    report = selectors.reliability_report(study=study)
    sort = request.GET.get("sort", "annotator")
    rows = sorted_rows(report.rows, sort)
    if request.GET.get("format") == "csv":
        buffer = io.StringIO()
        writer = safe_writer(buffer)
        writer.writerow(selectors.RELIABILITY_COLUMNS)
        for row in rows:
            writer.writerow(selectors.reliability_row(row).values())
        response = HttpResponse(buffer.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-annotators.csv"'
        return response
    names = sorted(row.username for row in report.rows)
    kappa_rows = [
        {
            "name": a,
            "cells": [report.kappas.get((min(a, b), max(a, b))) if a != b else None for b in names],
        }
        for a in names
    ]
    context = {
        "study": study,
        "rows": rows,
        "sort": sort,
        "columns": [(key, heading) for key, heading, _ in COLUMNS],
        "names": names,
        "kappa_rows": kappa_rows,
        "confusion": [
            {
                "username": row.username,
                "questions": [
                    {"key": key, "answers": answers, "rows": list(zip(answers, counts, strict=True))}
                    for key, (answers, counts) in row.confusion.items()
                ],
            }
            for row in rows
            if row.confusion
        ],
        "section": "reliability",
    }
    return render(request, "quality/reliability.html", context)


@researcher_only(methods=("POST",))
def gold_mark(request: HttpRequest, item_id: int) -> HttpResponse:
    """Use a settled item (agreed, or resolved by a researcher) as a gold item (the item page's button)."""
    item = get_object_or_404(Item.objects.select_related("study"), pk=item_id)
    try:
        services.gold_mark(item=item)
        messages.success(request, f"{item.key} is now a gold item of {item.study.name}.")
    except QualityError as exc:
        messages.error(request, str(exc))
    return redirect("annotate:item", item_id=item.pk)


@researcher_only(methods=("POST",))
def exclusion(request: HttpRequest, slug: str) -> HttpResponse:
    """Exclude (``action=exclude``) or re-include (``action=include``) the annotator ``username``."""
    study = study_or_404(slug)
    user = get_user_model().objects.filter(username=request.POST.get("username", "")).first()
    actor = request.user.get_username()
    if user is None:
        messages.error(request, "No such annotator.")
    else:
        try:
            if request.POST.get("action") == "include":
                done = services.annotator_include(study=study, annotator=user, actor=actor)
                messages.success(
                    request,
                    f"Re-included {user.get_username()}: {done.labels_returned} of {done.labels_moved} label(s) back.",
                )
            else:
                done = services.annotator_exclude(
                    study=study, annotator=user, actor=actor, reason=request.POST.get("reason", "")
                )
                messages.success(
                    request,
                    f"Excluded {user.get_username()}: {done.labels_moved} label(s) set aside, "
                    f"{done.finals_changed} agreed final label(s) changed.",
                )
        except QualityError as exc:
            messages.error(request, str(exc))
    return redirect("quality:reliability", slug=study.slug)
