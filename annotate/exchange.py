"""Labels and ground truth in and out of a study as files.

- ``ground_truth_rows`` / ``ground_truth_export``: one row per image of the study (unlabelled
  ones included), columns ``image, t2i_model, category, word, prompt, seed, annotator_1,
  label_1, …, annotator_N, label_N, final_label, resolved_by, note``. Used by the
  ``export_ground_truth`` command, the admin and the API.
- ``labels_import`` / ``ground_truth_import``: read a CSV, check every row first, report every
  bad row, and write only when the whole file is good, in one transaction, through
  ``annotate.services.label_import`` / ``final_label_set`` (the label rules live there).

Both imports also accept the export's own CSV, so export → import reproduces a study: the
wide ``annotator_i`` / ``label_i`` columns are read as labels and ``final_label`` as the label.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction

from annotate import roles, services
from annotate.errors import AnnotateError, ImportRejected
from annotate.ingest import ImportSummary, RejectedRow, csv_rows_read
from annotate.models import FinalLabel, Image, Label, Study

EXPORT_FORMATS = ("csv", "json")
HEAD_COLUMNS = ("image", "t2i_model", "category", "word", "prompt", "seed")
TAIL_COLUMNS = ("final_label", "resolved_by", "note")
# Wide export files carry no reasons; a label that needs one gets this text on re-import.
REASON_NOT_EXPORTED = "(imported from a ground-truth export, which carries no reasons)"
_USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")
_WIDE_RE = re.compile(r"^(annotator|label)_(\d+)$")


# --- export --------------------------------------------------------------------------------------


def ground_truth_columns(n_annotators: int) -> list[str]:
    """Export columns for a study with at most ``n_annotators`` labels per image."""
    middle: list[str] = []
    for i in range(1, n_annotators + 1):
        middle += [f"annotator_{i}", f"label_{i}"]
    return [*HEAD_COLUMNS, *middle, *TAIL_COLUMNS]


def _labels_by_image(study: Study) -> dict[int, list[tuple[str, str]]]:
    # Ordered by annotator id within an image, the order agreement metrics pair labels in, so
    # label_1 / label_2 of the file are the pairs kappa is computed on.
    grouped: dict[int, list[tuple[str, str]]] = {}
    rows = (
        Label.objects.filter(image__study=study)
        .order_by("image_id", "annotator_id")
        .values_list("image_id", "annotator__username", "value")
    )
    for image_id, username, value in rows:
        grouped.setdefault(image_id, []).append((username, value))
    return grouped


def ground_truth_rows(*, study: Study) -> list[dict[str, Any]]:
    """Every image of the study as an ordered dict of the export columns.

    ``seed`` is an int or None; missing annotators and an image without final label give "".
    The number of annotator columns is the larger of the study's N and the most labels any
    image has.
    """
    labels = _labels_by_image(study)
    n = max([study.labels_per_image, *(len(v) for v in labels.values())])
    finals = {
        f.image_id: f for f in FinalLabel.objects.filter(image__study=study).select_related("decided_by")
    }
    images = Image.objects.filter(study=study).select_related("prompt").order_by("id")
    rows = []
    for image in images:
        row: dict[str, Any] = {
            "image": image.source_path,
            "t2i_model": image.t2i_model,
            "category": image.prompt.category,
            "word": image.prompt.word,
            "prompt": image.prompt.text,
            "seed": image.seed,
        }
        given = labels.get(image.pk, [])
        for i in range(n):
            username, value = given[i] if i < len(given) else ("", "")
            row[f"annotator_{i + 1}"] = username
            row[f"label_{i + 1}"] = value
        final = finals.get(image.pk)
        row["final_label"] = final.value if final else ""
        row["resolved_by"] = final.decided_by.get_username() if final and final.decided_by else ""
        row["note"] = final.note if final else ""
        rows.append(row)
    return rows


def ground_truth_export(*, study: Study, fmt: str) -> str:
    """The study's ground truth as CSV text or a JSON document.

    JSON: ``{"study": slug, "labels": [values], "columns": [...], "rows": [{column: value}]}``.
    Raises ValueError for an unknown format.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    rows = ground_truth_rows(study=study)
    n = max([study.labels_per_image, *(_wide_count(r) for r in rows)])
    columns = ground_truth_columns(n)
    if fmt == "json":
        document = {"study": study.slug, "labels": study.label_values, "columns": columns, "rows": rows}
        return json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def _wide_count(row: dict[str, Any]) -> int:
    return sum(1 for key in row if key.startswith("annotator_"))


# --- shared import helpers -----------------------------------------------------------------------


class _Rollback(Exception):
    """Raised inside the write transaction when a service refused a row: undo the whole file."""


def _header(csv_path: str | os.PathLike[str]) -> list[str]:
    """The header row, to tell the long format from an export file (errors as csv_rows_read)."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            first = next(csv.reader(fh), [])
    except FileNotFoundError as exc:
        raise ImportRejected(f"{csv_path}: file not found") from exc
    except UnicodeDecodeError as exc:
        raise ImportRejected(f"{os.path.basename(csv_path)}: not UTF-8 text ({exc.reason})") from exc
    except csv.Error as exc:
        raise ImportRejected(f"{os.path.basename(csv_path)}: not a readable CSV file ({exc})") from exc
    return [name.strip() for name in first]


def _images_by_path(study: Study) -> dict[str, Image]:
    return {image.source_path: image for image in Image.objects.filter(study=study).select_related("study")}


def _refuse_all(summary: ImportSummary) -> ImportSummary:
    """Nothing is written when any row is bad: say so in the summary."""
    summary.accepted = 0
    summary.duplicates = 0
    summary.rejected.sort(key=lambda r: r.row)
    return summary


# --- labels ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LabelRow:
    number: int
    path: str
    username: str
    value: str
    reason: str
    wide: bool = False  # from an export file, which has no reason column


def _label_rows(csv_path: str | os.PathLike[str]) -> tuple[list[_LabelRow], list[RejectedRow]]:
    """Read a labels file in the long format (image, annotator, label, reason) or the export's
    wide format (annotator_i, label_i); return label rows and rows that cannot be read."""
    header = _header(csv_path)
    if "annotator" in header or not any(_WIDE_RE.match(c) for c in header):
        rows = csv_rows_read(csv_path, required=("image", "annotator", "label"))
        items, bad = [], []
        for number, row in rows:
            if "__error__" in row:
                bad.append(RejectedRow(number, "", row["__error__"]))
                continue
            items.append(
                _LabelRow(number, row["image"], row["annotator"], row["label"], row.get("reason", ""))
            )
        return items, bad
    return _wide_label_rows(csv_path, header)


def _wide_label_rows(
    csv_path: str | os.PathLike[str], header: list[str]
) -> tuple[list[_LabelRow], list[RejectedRow]]:
    indexes = sorted({int(m.group(2)) for c in header if (m := _WIDE_RE.match(c))})
    required = ["image"] + [f"{kind}_{i}" for i in indexes for kind in ("annotator", "label")]
    rows = csv_rows_read(csv_path, required=required)
    items, bad = [], []
    for number, row in rows:
        if "__error__" in row:
            bad.append(RejectedRow(number, "", row["__error__"]))
            continue
        for i in indexes:
            username, value = row[f"annotator_{i}"], row[f"label_{i}"]
            if not username and not value:
                continue
            if not username or not value:
                bad.append(RejectedRow(number, row["image"], f"annotator_{i} and label_{i} must both be set"))
                continue
            items.append(_LabelRow(number, row["image"], username, value, "", wide=True))
    return items, bad


def _label_row_problem(
    item: _LabelRow, study: Study, images: dict[str, Image], seen: dict[tuple[str, str], int]
) -> str | None:
    if not item.path:
        return "empty 'image' value"
    if item.path not in images:
        return f"unknown image: {item.path} is not an image of the study '{study.slug}'"
    if not _USERNAME_RE.match(item.username):
        return f"invalid annotator username {item.username!r}"
    spec = study.label_spec(item.value)
    if spec is None:
        return f"unknown label {item.value!r} (valid labels: {', '.join(study.label_values)})"
    key = (item.path, item.username)
    if key in seen:
        return f"duplicate row: same image and annotator as row {seen[key]}"
    seen[key] = item.number
    return None


def _users_ensure(usernames: list[str]) -> dict[str, AbstractBaseUser]:
    """Existing users by name; missing ones are created (unusable password, annotator group)
    in the given order."""
    user_model = get_user_model()
    users = {u.get_username(): u for u in user_model.objects.filter(username__in=usernames)}
    missing = [name for name in usernames if name not in users]
    if missing:
        group, _ = Group.objects.get_or_create(name=roles.ANNOTATOR)
        for name in missing:
            user = user_model.objects.create_user(username=name)
            user.groups.add(group)
            users[name] = user
    return users


def _creation_order(items: list[_LabelRow]) -> list[str]:
    """Usernames in an order that keeps, on every image, the order annotators appear in.

    Exports list an image's annotators by user id; creating missing users in an order
    consistent with every row makes a re-imported study pair its labels the same way, so
    kappa (which depends on which label is rater 1) comes out identical.
    """
    sorter: TopologicalSorter[str] = TopologicalSorter()
    first_seen: dict[str, int] = {}
    by_image: dict[str, list[str]] = {}
    for position, item in enumerate(items):
        first_seen.setdefault(item.username, position)
        names = by_image.setdefault(item.path, [])
        sorter.add(item.username, *names)
        names.append(item.username)
    try:
        sorter.prepare()
    except CycleError:
        return sorted(first_seen, key=first_seen.__getitem__)
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=first_seen.__getitem__)
        order += ready
        sorter.done(*ready)
    return order


def labels_import(*, study: Study, csv_path: str | os.PathLike[str]) -> ImportSummary:
    """Import annotators' labels for images of ``study`` from a CSV.

    Columns ``image`` (manifest path), ``annotator`` (username; created as an annotator if
    missing), ``label``, optional ``reason`` — or the export's wide columns. Every row is
    checked first (unknown image, unknown label, duplicate row, bad username); if any row is bad
    nothing is written and all bad rows are reported. Then every label goes through
    ``services.label_import`` in one transaction; a row the service refuses (image already has N
    annotators, missing reason, final label already decided) rolls the whole file back.
    Re-importing the same file changes nothing (rows count as duplicates).
    """
    items, bad = _label_rows(csv_path)
    summary = ImportSummary(rejected=list(bad))
    images = _images_by_path(study)
    seen: dict[tuple[str, str], int] = {}
    for item in items:
        problem = _label_row_problem(item, study, images, seen)
        if problem:
            summary.rejected.append(RejectedRow(item.number, item.path, problem))
    if summary.rejected:
        return _refuse_all(summary)
    try:
        with transaction.atomic():
            users = _users_ensure(_creation_order(items))
            for item in items:
                _label_write(item, study, images[item.path], users[item.username], summary)
            if summary.rejected:
                raise _Rollback
    except _Rollback:
        return _refuse_all(summary)
    return summary


def _label_write(
    item: _LabelRow, study: Study, image: Image, annotator: AbstractBaseUser, summary: ImportSummary
) -> None:
    reason = item.reason
    spec = study.label_spec(item.value) or {}
    if item.wide and not reason and spec.get("requires_reason"):
        reason = REASON_NOT_EXPORTED
    before = Label.objects.filter(image=image, annotator=annotator).values_list("value", "reason").first()
    if item.wide and before is not None and before[0] == item.value:
        # An export carries no reasons: the same value already stored keeps its own reason.
        summary.duplicates += 1
        return
    try:
        services.label_import(image=image, annotator=annotator, value=item.value, reason=reason)
    except AnnotateError as exc:
        summary.rejected.append(RejectedRow(item.number, item.path, f"{item.username}: {exc}"))
        return
    if before == (item.value, reason):
        summary.duplicates += 1
    else:
        summary.accepted += 1


# --- ground truth -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TruthRow:
    number: int
    path: str
    value: str
    note: str


def ground_truth_import(
    *, study: Study, csv_path: str | os.PathLike[str], user: AbstractBaseUser | None
) -> ImportSummary:
    """Set final labels of ``study``'s images from a CSV: columns ``image``, ``label`` (or the
    export's ``final_label``), optional ``note``; ``user`` is recorded as who decided.

    All rows are checked first (unknown image, unknown or empty label, duplicate image); if any
    is bad nothing is written. Otherwise every final label goes through
    ``services.final_label_set`` (source "imported") in one transaction. An image whose final
    label already has the same value and note is left as it is (counted as duplicate), so
    re-importing, or importing an export over the labels it came from, changes nothing. In an
    export file, images without a final label are skipped.
    """
    header = _header(csv_path)
    from_export = "label" not in header and "final_label" in header
    label_column = "final_label" if from_export else "label"
    rows = csv_rows_read(csv_path, required=("image", label_column))
    summary = ImportSummary()
    images = _images_by_path(study)
    items: list[_TruthRow] = []
    seen: dict[str, int] = {}
    for number, row in rows:
        if "__error__" in row:
            summary.rejected.append(RejectedRow(number, "", row["__error__"]))
            continue
        item = _TruthRow(number, row["image"], row[label_column], row.get("note", ""))
        if from_export and not item.value:
            summary.skipped += 1
            continue
        problem = _truth_row_problem(item, study, images, seen)
        if problem:
            summary.rejected.append(RejectedRow(number, item.path, problem))
        else:
            items.append(item)
    if summary.rejected:
        return _refuse_all(summary)
    try:
        with transaction.atomic():
            for item in items:
                _truth_write(item, images[item.path], user, summary)
            if summary.rejected:
                raise _Rollback
    except _Rollback:
        return _refuse_all(summary)
    return summary


def _truth_row_problem(
    item: _TruthRow, study: Study, images: dict[str, Image], seen: dict[str, int]
) -> str | None:
    if not item.path:
        return "empty 'image' value"
    if item.path not in images:
        return f"unknown image: {item.path} is not an image of the study '{study.slug}'"
    if not item.value:
        return "empty label"
    if study.label_spec(item.value) is None:
        return f"unknown label {item.value!r} (valid labels: {', '.join(study.label_values)})"
    if item.path in seen:
        return f"duplicate row: same image as row {seen[item.path]}"
    seen[item.path] = item.number
    return None


def _truth_write(
    item: _TruthRow, image: Image, user: AbstractBaseUser | None, summary: ImportSummary
) -> None:
    current = FinalLabel.objects.filter(image=image).values_list("value", "note").first()
    if current == (item.value, item.note):
        summary.duplicates += 1
        return
    try:
        services.final_label_set(image=image, value=item.value, decided_by=user, note=item.note)
    except AnnotateError as exc:
        summary.rejected.append(RejectedRow(item.number, item.path, str(exc)))
        return
    summary.accepted += 1


def study_by_slug(slug: str) -> Study:
    """The study with this slug, or ImportRejected naming the studies that exist."""
    study = Study.objects.filter(slug=slug).first()
    if study is None:
        known = ", ".join(Study.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise ImportRejected(f"no study with slug '{slug}' (existing studies: {known})")
    return study
