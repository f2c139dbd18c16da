"""Labels and ground truth in and out of a study as files.

- ``ground_truth_rows`` / ``ground_truth_export``: one row per (item, question) of the study
  (unlabelled items included), columns ``item, question, image, [input_image, output_image,]
  t2i_model, category, word, prompt, seed, annotator_1, label_1, reason_1, …, annotator_N,
  label_N, reason_N, final_label, resolved_by, note``. ``image`` is the item's first image (its
  import path); pairs also name their seed and edit. Used by the ``export_ground_truth``
  command, the admin and the API.
- ``labels_import`` / ``ground_truth_import``: read a CSV, check every row first, report every
  bad row, and write only when the whole file is good, in one transaction, through
  ``annotate.services.label_import`` / ``final_label_set`` (the label rules live there).

Both imports also accept the export's own CSV, so export → import reproduces a study: the
wide ``annotator_i`` / ``label_i`` / ``reason_i`` columns are read as labels and ``final_label``
as the final answer.
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
from django.contrib.auth.models import Group, User
from django.db import transaction

from annotate import services
from annotate.errors import AnnotateError, ImportRejected
from annotate.models import FinalLabel, FinalLabelSource, Label
from studies import permissions
from studies.csvio import safe_dict_writer
from studies.ingest import ImportSummary, RejectedRow, csv_rows_read
from studies.models import ImageRole, Item, ItemImage, Question, Study
from studies.selectors import item_questions, study_questions
from studies.selectors import study_by_slug as _study_by_slug

EXPORT_FORMATS = ("csv", "json")
HEAD_COLUMNS = ("item", "question", "image")
PAIR_COLUMNS = ("input_image", "output_image")
ITEM_COLUMNS = ("t2i_model", "category", "word", "prompt", "seed")
TAIL_COLUMNS = ("final_label", "resolved_by", "note")
# Old export files carry no reasons: a label that needs one gets this text on re-import.
REASON_NOT_EXPORTED = "(imported from a ground-truth export, which carries no reasons)"
_USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")
# Label.value's column size: a longer value is a row error, never a database error.
LABEL_VALUE_MAX_CHARS = 1000
_WIDE_RE = re.compile(r"^(annotator|label|reason)_(\d+)$")


# --- export --------------------------------------------------------------------------------------


def _is_pair_study(study: Study) -> bool:
    return study.protocol == "pair_change"


def ground_truth_columns(n_annotators: int, *, pairs: bool = False) -> list[str]:
    """Export columns for a study with at most ``n_annotators`` labels per (item, question)."""
    middle: list[str] = []
    for i in range(1, n_annotators + 1):
        middle += [f"annotator_{i}", f"label_{i}", f"reason_{i}"]
    return [*HEAD_COLUMNS, *(PAIR_COLUMNS if pairs else ()), *ITEM_COLUMNS, *middle, *TAIL_COLUMNS]


def _labels_by_item(study: Study) -> dict[tuple[int, int], list[tuple[str, str, str]]]:
    # Ordered by annotator id within an item, the order agreement metrics pair labels in, so
    # label_1 / label_2 of the file are the pairs kappa is computed on.
    grouped: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
    rows = (
        Label.objects.filter(item__study=study)
        .order_by("item_id", "question_id", "annotator_id")
        .values_list("item_id", "question_id", "annotator__username", "value", "reason")
    )
    for item_id, question_id, username, value, reason in rows:
        grouped.setdefault((item_id, question_id), []).append((username, value, reason))
    return grouped


def ground_truth_rows(*, study: Study) -> list[dict[str, Any]]:
    """One ordered dict of the export columns per (item, question) the study asks, by item id
    then question order.

    ``seed`` is an int or None; missing annotators and an answer without final label give "".
    The number of annotator columns is the larger of the study's N and the most labels any
    answer has.
    """
    labels = _labels_by_item(study)
    n = max([study.labels_per_item, *(len(v) for v in labels.values())])
    finals = {
        (f.item_id, f.question_id): f
        for f in FinalLabel.objects.filter(item__study=study).select_related("decided_by")
    }
    links: dict[int, dict[str, str]] = {}
    for item_id, role, path in ItemImage.objects.filter(item__study=study).values_list(
        "item_id", "role", "source_path"
    ):
        links.setdefault(item_id, {})[role] = path
    questions = study_questions(study)
    pairs = _is_pair_study(study)
    rows = []
    for item in Item.objects.filter(study=study).select_related("prompt").order_by("id"):
        paths = links.get(item.pk, {})
        first = paths.get(ImageRole.IMAGE) or paths.get(ImageRole.INPUT) or paths.get(ImageRole.OUTPUT, "")
        prompt = item.prompt
        for question in item_questions(item, questions):
            row: dict[str, Any] = {"item": item.key, "question": question.key, "image": first}
            if pairs:
                row["input_image"] = paths.get(ImageRole.INPUT, "")
                row["output_image"] = paths.get(ImageRole.OUTPUT, "")
            row.update(
                {
                    "t2i_model": item.t2i_model,
                    "category": prompt.category if prompt else "",
                    "word": prompt.word if prompt else "",
                    "prompt": prompt.text if prompt else "",
                    "seed": item.seed,
                }
            )
            given = labels.get((item.pk, question.pk), [])
            for i in range(n):
                username, value, reason = given[i] if i < len(given) else ("", "", "")
                row[f"annotator_{i + 1}"] = username
                row[f"label_{i + 1}"] = value
                row[f"reason_{i + 1}"] = reason
            final = finals.get((item.pk, question.pk))
            row["final_label"] = final.value if final else ""
            row["resolved_by"] = final.decided_by.get_username() if final and final.decided_by else ""
            row["note"] = final.note if final else ""
            rows.append(row)
    return rows


def ground_truth_export(*, study: Study, fmt: str) -> str:
    """The study's ground truth as CSV text or a JSON document.

    JSON: ``{"study": slug, "protocol", "labels": [the first question's values], "questions":
    [{"key", "text", "values"}], "columns": [...], "rows": [{column: value}]}``. Raises
    ValueError for an unknown format.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    rows = ground_truth_rows(study=study)
    n = max([study.labels_per_item, *(_wide_count(r) for r in rows)])
    columns = ground_truth_columns(n, pairs=_is_pair_study(study))
    if fmt == "json":
        questions = study_questions(study)
        document = {
            "study": study.slug,
            "protocol": study.protocol,
            "labels": questions[0].values if questions else [],
            "questions": [{"key": q.key, "text": q.text, "values": q.values} for q in questions],
            "columns": columns,
            "rows": rows,
        }
        return json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    buffer = io.StringIO()
    writer = safe_dict_writer(buffer, columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def _wide_count(row: dict[str, Any]) -> int:
    return sum(1 for key in row if key.startswith("annotator_"))


# --- shared import helpers -----------------------------------------------------------------------


class _Rollback(Exception):
    """Raised inside the write transaction when a service refused a row: undo the whole file."""


class _DryRunDone(Exception):
    """Raised at the end of a dry run's write transaction: every write was made and checked by
    the services, now undo them all (the summary keeps what they did)."""


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
    except OSError as exc:
        raise ImportRejected(f"{csv_path}: cannot read the CSV file ({exc.strerror or exc})") from exc
    return [name.strip() for name in first]


class _Items:
    """Resolve a row's item: by ``item`` (the item key) or, for one-image items, by ``image`` (the
    path it was imported under); and its question: by ``question``, or the study's only one."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.by_key = {item.key: item for item in Item.objects.filter(study=study).select_related("study")}
        self.by_path = {}
        by_id = {item.pk: item for item in self.by_key.values()}
        for item_id, path in ItemImage.objects.filter(item__study=study, role=ImageRole.IMAGE).values_list(
            "item_id", "source_path"
        ):
            self.by_path[path] = by_id[item_id]
        self.questions = {q.key: q for q in study_questions(study)}

    def item(self, key: str, path: str) -> tuple[Item | None, str | None]:
        if key:
            item = self.by_key.get(key)
            return (
                (item, None)
                if item
                else (None, f"unknown item: {key} is not an item of the study '{self.study.slug}'")
            )
        if not path:
            return None, "empty 'image' value (or give the 'item' column)"
        item = self.by_path.get(path) or self.by_key.get(path)
        if item is None:
            return None, f"unknown image: {path} is not an image of the study '{self.study.slug}'"
        return item, None

    def question(self, key: str, item: Item) -> tuple[Question | None, str | None]:
        if not key:
            if len(self.questions) != 1:
                return None, f"the study asks {len(self.questions)} questions: give the 'question' column"
            key = next(iter(self.questions))
        question = self.questions.get(key)
        if question is None:
            return None, f"unknown question {key!r} (questions: {', '.join(self.questions)})"
        if question not in item_questions(item, list(self.questions.values())):
            return None, f"the item {item.key} does not ask the question {key!r}"
        return question, None


def _answer_problem(question: Question, value: str) -> str | None:
    try:
        services.answer_validate(question, value)
    except AnnotateError:
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"unknown label {shown!r} for {question.key} (valid labels: {', '.join(question.values)})"
    return None


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
    item_key: str
    path: str
    question: str
    username: str
    value: str
    reason: str
    has_reason: bool = True  # False: from an old export file, which had no reason columns

    @property
    def shown(self) -> str:
        return self.item_key or self.path


def _label_rows(csv_path: str | os.PathLike[str]) -> tuple[list[_LabelRow], list[RejectedRow]]:
    """Read a labels file in the long format (image or item, annotator, label, optional reason
    and question) or the export's wide format (annotator_i, label_i[, reason_i]); return label
    rows and rows that cannot be read."""
    header = _header(csv_path)
    if "annotator" in header or not any(_WIDE_RE.match(c) for c in header):
        where = "item" if "item" in header and "image" not in header else "image"
        rows = csv_rows_read(csv_path, required=(where, "annotator", "label"))
        labels, bad = [], []
        for number, row in rows:
            if "__error__" in row:
                bad.append(RejectedRow(number, "", row["__error__"]))
                continue
            labels.append(
                _LabelRow(
                    number,
                    row.get("item", ""),
                    row.get("image", ""),
                    row.get("question", ""),
                    row["annotator"],
                    row["label"],
                    row.get("reason", ""),
                )
            )
        return labels, bad
    return _wide_label_rows(csv_path, header)


def _wide_label_rows(
    csv_path: str | os.PathLike[str], header: list[str]
) -> tuple[list[_LabelRow], list[RejectedRow]]:
    indexes = sorted({int(m.group(2)) for c in header if (m := _WIDE_RE.match(c))})
    where = "item" if "item" in header else "image"
    required = [where] + [f"{kind}_{i}" for i in indexes for kind in ("annotator", "label")]
    rows = csv_rows_read(csv_path, required=required)
    labels, bad = [], []
    for number, row in rows:
        if "__error__" in row:
            bad.append(RejectedRow(number, "", row["__error__"]))
            continue
        for i in indexes:
            username, value = row[f"annotator_{i}"], row[f"label_{i}"]
            if not username and not value:
                continue
            if not username:
                # An annotator with an empty label is a label (a "classes" question answered with
                # no class); a label without its annotator is not.
                bad.append(
                    RejectedRow(number, row.get(where, ""), f"label_{i} is set but annotator_{i} is empty")
                )
                continue
            labels.append(
                _LabelRow(
                    number,
                    row.get("item", ""),
                    row.get("image", ""),
                    row.get("question", ""),
                    username,
                    value,
                    row.get(f"reason_{i}", ""),
                    has_reason=f"reason_{i}" in row,
                )
            )
    return labels, bad


def _label_row_problem(
    row: _LabelRow, items: _Items, seen: dict[tuple[int, int, str], int]
) -> tuple[str | None, Item | None, Question | None]:
    item, problem = items.item(row.item_key, row.path)
    if item is None:
        return problem, None, None
    question, problem = items.question(row.question, item)
    if question is None:
        return problem, None, None
    if not _USERNAME_RE.match(row.username):
        return f"invalid annotator username {row.username!r}", None, None
    if len(row.value) > LABEL_VALUE_MAX_CHARS:
        return f"the label is longer than {LABEL_VALUE_MAX_CHARS} characters", None, None
    problem = _answer_problem(question, row.value)
    if problem:
        return problem, None, None
    if "\x00" in row.reason:
        return "the reason contains a NUL character", None, None
    if len(row.reason) > services.REASON_MAX_CHARS:
        return f"the reason is longer than {services.REASON_MAX_CHARS} characters", None, None
    key = (item.pk, question.pk, row.username)
    if key in seen:
        return f"duplicate row: same item, question and annotator as row {seen[key]}", None, None
    seen[key] = row.number
    return None, item, question


def _users_ensure(usernames: list[str]) -> dict[str, User]:
    """Existing users by name; missing ones are created (unusable password, annotator group)
    in the given order."""
    user_model = get_user_model()
    users = {u.get_username(): u for u in user_model.objects.filter(username__in=usernames)}
    missing = [name for name in usernames if name not in users]
    if missing:
        group, _ = Group.objects.get_or_create(name=permissions.ANNOTATOR)
        for name in missing:
            user = user_model.objects.create_user(username=name)
            user.groups.add(group)
            users[name] = user
    return users


def _creation_order(rows: list[tuple[_LabelRow, Item, Question]]) -> list[str]:
    """Usernames in an order that keeps, on every item, the order annotators appear in.

    Exports list an item's annotators by user id; creating missing users in an order
    consistent with every row makes a re-imported study pair its labels the same way, so
    kappa (which depends on which label is rater 1) comes out identical.
    """
    sorter: TopologicalSorter[str] = TopologicalSorter()
    first_seen: dict[str, int] = {}
    by_item: dict[tuple[int, int], list[str]] = {}
    for position, (row, item, question) in enumerate(rows):
        first_seen.setdefault(row.username, position)
        names = by_item.setdefault((item.pk, question.pk), [])
        sorter.add(row.username, *names)
        names.append(row.username)
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


def _role_problems(study: Study, good: list[tuple[_LabelRow, Item, Question]]) -> list[RejectedRow]:
    """Rows naming an existing researcher's or admin's account that is not an annotator of the
    study: importing would silently make that account one. One query for the users, one for
    the study's annotators; the rows of each account are named once (first row)."""
    names = {row.username for row, _, _ in good}
    users = {u.get_username(): u for u in get_user_model().objects.filter(username__in=names)}
    members = set(study.annotators.values_list("pk", flat=True))
    problems, named = [], set()
    for row, _, _ in good:
        user = users.get(row.username)
        if user is None or user.pk in members or row.username in named:
            continue
        if permissions.is_researcher(user):
            role = "an admin" if permissions.is_admin(user) else "a researcher"
            named.add(row.username)
            problems.append(
                RejectedRow(
                    row.number,
                    row.shown,
                    f"annotator {row.username!r} is {role}, not an annotator of the study "
                    f"'{study.slug}': importing these labels would make them one; check the "
                    "name, or pass --add-annotators to add them",
                )
            )
    return problems


def labels_import(
    *,
    study: Study,
    csv_path: str | os.PathLike[str],
    add_annotators: bool = False,
    dry_run: bool = False,
) -> ImportSummary:
    """Import annotators' labels for items of ``study`` from a CSV.

    Columns ``image`` (the manifest path of a one-image item) or ``item`` (the item key),
    ``annotator`` (username; created as an annotator if missing), ``label``, optional
    ``reason`` and ``question`` (required when the study asks more than one) — or the export's
    wide columns. Every row is checked first (unknown item or question, a question the item
    does not ask, unknown label, duplicate row, bad username); if any row is bad nothing is
    written and all bad rows are reported. Then every label goes through
    ``services.label_import`` in one transaction; a row the service refuses (item already has N
    annotators, missing reason, final label already decided) rolls the whole file back.
    Re-importing the same file changes nothing (rows count as duplicates).

    The summary counts new labels (``accepted``), labels whose answer or reason changed
    (``changed``) and the (item, question)s whose agreed final answer the change undid, back to
    disputed (``reopened``). An existing researcher's or admin's account that is not yet an
    annotator of the study is refused (naming row and user) unless ``add_annotators``. With
    ``dry_run`` the whole import runs and is rolled back: the summary says what it would do.
    """
    rows, bad = _label_rows(csv_path)
    summary = ImportSummary(rejected=list(bad), dry_run=dry_run, reports=("changed",))
    items = _Items(study)
    seen: dict[tuple[int, int, str], int] = {}
    good: list[tuple[_LabelRow, Item, Question]] = []
    for row in rows:
        problem, item, question = _label_row_problem(row, items, seen)
        if problem:
            summary.rejected.append(RejectedRow(row.number, row.shown, problem))
        else:
            assert item is not None
            assert question is not None
            good.append((row, item, question))
    if not add_annotators:
        summary.rejected.extend(_role_problems(study, good))
    if summary.rejected:
        return _refuse_all(summary)
    touched = {(item.pk, question.pk): (item, question) for _, item, question in good}
    try:
        with transaction.atomic():
            agreed_before = _agreed_finals(study, touched)
            users = _users_ensure(_creation_order(good))
            for row, item, question in good:
                _label_write(row, item, question, users[row.username], summary)
            if summary.rejected:
                raise _Rollback
            gone = agreed_before - _agreed_finals(study, touched)
            several = len(study_questions(study)) > 1
            summary.reopened = [
                touched[key][0].key + (f" ({touched[key][1].key})" if several else "") for key in sorted(gone)
            ]
            if dry_run:
                raise _DryRunDone
    except _Rollback:
        return _refuse_all(summary)
    except _DryRunDone:
        pass
    return summary


def _agreed_finals(study: Study, touched: dict[tuple[int, int], Any]) -> set[tuple[int, int]]:
    """The (item, question) pairs among ``touched`` that have an agreed final answer (one query)."""
    pairs = FinalLabel.objects.filter(
        item__study=study, source=FinalLabelSource.AGREED, item_id__in={item for item, _ in touched}
    ).values_list("item_id", "question_id")
    return {pair for pair in pairs if pair in touched}


def _label_write(
    row: _LabelRow, item: Item, question: Question, annotator: User, summary: ImportSummary
) -> None:
    reason = row.reason
    choice = question.choice(row.value) or {}
    before = (
        Label.objects.filter(item=item, question=question, annotator=annotator)
        .values_list("value", "reason")
        .first()
    )
    if not row.has_reason:
        if before is not None and before[0] == row.value:
            # An old export carries no reasons: the same value already stored keeps its own reason.
            summary.duplicates += 1
            return
        if choice.get("requires_reason"):
            reason = REASON_NOT_EXPORTED
    try:
        services.label_import(
            item=item, question=question, annotator=annotator, value=row.value, reason=reason
        )
    except AnnotateError as exc:
        summary.rejected.append(RejectedRow(row.number, row.shown, f"{row.username}: {exc}"))
        return
    if before == (row.value, reason):
        summary.duplicates += 1
    elif before is not None:
        summary.changed += 1
    else:
        summary.accepted += 1


# --- ground truth -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TruthRow:
    number: int
    item_key: str
    path: str
    question: str
    value: str
    note: str
    decided_by: str = ""  # the file's resolved_by: who decided, by username

    @property
    def shown(self) -> str:
        return self.item_key or self.path


def ground_truth_import(
    *, study: Study, csv_path: str | os.PathLike[str], user: User | None, dry_run: bool = False
) -> ImportSummary:
    """Set final answers of ``study``'s items from a CSV: columns ``image`` or ``item``,
    ``label`` (or the export's ``final_label``), optional ``note``, ``question`` (required
    when the study asks more than one) and ``resolved_by`` (who decided, by username).

    Who decided: the row's ``resolved_by`` when it names someone (a user missing from the
    database is created without a password or role: the name is a record, not a login),
    else ``user``. So an export imported into an empty database exports the same again.

    All rows are checked first (unknown item or question, unknown or empty label, duplicate
    row, bad username, NUL in the note); if any is bad nothing is written. Otherwise every
    final label goes through ``services.final_label_set`` (source "imported") in one
    transaction. An answer whose final label already has the same value and note is left as
    it is (counted as duplicate), so re-importing, or importing an export over the labels it
    came from, changes nothing. In an export file, answers without a final label are skipped.
    With ``dry_run`` the whole import runs and is rolled back: the summary says what it would do.
    """
    header = _header(csv_path)
    from_export = "label" not in header and "final_label" in header
    label_column = "final_label" if from_export else "label"
    where = "item" if "item" in header and "image" not in header else "image"
    rows = csv_rows_read(csv_path, required=(where, label_column))
    summary = ImportSummary(dry_run=dry_run)
    items = _Items(study)
    good: list[tuple[_TruthRow, Item, Question]] = []
    seen: dict[tuple[int, int], int] = {}
    for number, raw in rows:
        if "__error__" in raw:
            summary.rejected.append(RejectedRow(number, "", raw["__error__"]))
            continue
        row = _TruthRow(
            number,
            raw.get("item", ""),
            raw.get("image", ""),
            raw.get("question", ""),
            raw[label_column],
            raw.get("note", ""),
            raw.get("resolved_by", ""),
        )
        if from_export and not row.value:
            summary.skipped += 1
            continue
        problem, item, question = _truth_row_problem(row, items, seen)
        if problem:
            summary.rejected.append(RejectedRow(number, row.shown, problem))
        else:
            assert item is not None
            assert question is not None
            good.append((row, item, question))
    if summary.rejected:
        return _refuse_all(summary)
    try:
        with transaction.atomic():
            deciders = _deciders_ensure(sorted({row.decided_by for row, _, _ in good if row.decided_by}))
            for row, item, question in good:
                decided_by = deciders[row.decided_by] if row.decided_by else user
                _truth_write(row, item, question, decided_by, summary)
            if summary.rejected:
                raise _Rollback
            if dry_run:
                raise _DryRunDone
    except _Rollback:
        return _refuse_all(summary)
    except _DryRunDone:
        pass
    return summary


def _deciders_ensure(usernames: list[str]) -> dict[str, User]:
    """The users named as deciders; missing ones are created with no password and no role."""
    user_model = get_user_model()
    users = {u.get_username(): u for u in user_model.objects.filter(username__in=usernames)}
    for name in usernames:
        if name not in users:
            users[name] = user_model.objects.create_user(username=name)
    return users


def _truth_row_problem(
    row: _TruthRow, items: _Items, seen: dict[tuple[int, int], int]
) -> tuple[str | None, Item | None, Question | None]:
    item, problem = items.item(row.item_key, row.path)
    if item is None:
        return problem, None, None
    question, problem = items.question(row.question, item)
    if question is None:
        return problem, None, None
    if not row.value:
        return "empty label", None, None
    if len(row.value) > LABEL_VALUE_MAX_CHARS:
        return f"the label is longer than {LABEL_VALUE_MAX_CHARS} characters", None, None
    problem = _answer_problem(question, row.value)
    if problem:
        return problem, None, None
    if "\x00" in row.note:
        return "the note contains a NUL character", None, None
    if row.decided_by and not _USERNAME_RE.match(row.decided_by):
        return f"invalid resolved_by username {row.decided_by!r}", None, None
    key = (item.pk, question.pk)
    if key in seen:
        return f"duplicate row: same item and question as row {seen[key]}", None, None
    seen[key] = row.number
    return None, item, question


def _truth_write(
    row: _TruthRow, item: Item, question: Question, user: User | None, summary: ImportSummary
) -> None:
    current = FinalLabel.objects.filter(item=item, question=question).values_list("value", "note").first()
    if current == (row.value, row.note):
        summary.duplicates += 1
        return
    try:
        services.final_label_set(
            item=item, question=question, value=row.value, decided_by=user, note=row.note
        )
    except AnnotateError as exc:
        summary.rejected.append(RejectedRow(row.number, row.shown, str(exc)))
        return
    summary.accepted += 1


def study_by_slug(slug: str) -> Study:
    """The study with this slug, or ImportRejected naming the studies that exist."""
    return _study_by_slug(
        slug,
        missing=lambda known: ImportRejected(
            f"no study with slug '{slug}' (existing studies: {known or 'none yet'})"
        ),
    )
