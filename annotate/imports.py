"""Labels and ground truth from CSV files (``annotate.exports``' own too), on ``studies.imports``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from graphlib import CycleError, TopologicalSorter
from typing import Any, NamedTuple

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import connection

from annotate import services, sql
from annotate.errors import AnnotateError
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    Label,
    LabelRevision,
)
from studies import permissions
from studies.batching import chunk_rows, in_rows
from studies.imports import Importer, ImportSummary, RejectedRow, csv_header, csv_rows_stream, import_run
from studies.kinds import kind_of
from studies.models import ImageRole, Item, Question, Study
from studies.selectors import study_questions

#: What the ground-truth import compares of an item's current finals.
FINAL_FIELDS = ("item_id", "question_id", "value", "note")

# Old export files carry no reasons: a label that needs one gets this text on re-import.
REASON_NOT_EXPORTED = "(imported from a ground-truth export, which carries no reasons)"
_USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")
# Label.value's column size: a longer value is a row error, never a database error.
LABEL_VALUE_MAX_CHARS = 1000
_WIDE_RE = re.compile(r"^(annotator|label|reason)_(\d+)$")
#: The tables a label or ground-truth import writes into (their statistics refreshed after it).
LABEL_TABLES = (Label, LabelRevision, Assignment, FinalLabel, FinalLabelRevision)


def _where(header: list[str]) -> str:
    """The column that names a row's item: ``item``, or ``image`` (a one-image item's path)."""
    return "item" if "item" in header and "image" not in header else "image"


# What the label rules read of an item: loading only these halves an import's reads.
_ITEM_FIELDS = ("id", "key", "study_id", "question_keys", "metadata")
# Those an item ref holds, in the model's field order (the order from_db reads a partial row in).
_REF_FIELDS = ["id", "study_id", "key", "question_keys"]


class _ItemRef(NamedTuple):
    """What the checks read of an item; ``asks``: its question keys (None: every question)."""

    pk: int
    key: str
    question_keys: list[str]
    asks: frozenset[str] | None


def _item_ref(pk: int, key: str, question_keys: Any) -> _ItemRef:
    return _ItemRef(pk, key, question_keys, frozenset(question_keys) if question_keys else None)


class _Items:
    """A batch's items by ``item`` key or ``image`` path, and the study's questions."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.by_key: dict[str, _ItemRef] = {}
        self.by_path: dict[str, _ItemRef] = {}
        self.questions = {q.key: q for q in study_questions(study)}
        self.answer_problem = cache(_answer_problem)  # per batch: a file repeats a few answers

    def load(self, keys: set[str], paths: set[str]) -> None:
        """Look up the items of one batch of rows by key and by path, in plain SQL."""
        self.by_key, self.by_path, self.answer_problem = {}, {}, cache(_answer_problem)
        # A value with a NUL character names no item (and PostgreSQL refuses it in a query).
        keys = {key for key in keys if "\x00" not in key}
        paths = {path for path in paths if "\x00" not in path}
        convert = sql.converter(Item, ["question_keys"])
        study, image = self.study.pk, ImageRole.IMAGE.value
        by_path = chunk_rows(
            sql.import_items_by_path, sorted(paths), "l.source_path", study, image, array="text"
        )
        for path, pk, key, question_keys in by_path:
            self.by_path[path] = _item_ref(pk, key, *convert([question_keys]))
        # A path no image was imported under may be an item key (item() falls back to it).
        keys |= paths - self.by_path.keys()
        for pk, key, question_keys in chunk_rows(
            sql.import_items_by_key, sorted(keys), connection.ops.quote_name("key"), study, array="text"
        ):
            self.by_key[key] = _item_ref(pk, key, *convert([question_keys]))

    def item(self, key: str, path: str) -> tuple[_ItemRef | None, str | None]:
        if key and key in self.by_key:
            return self.by_key[key], None
        if key:
            return None, f"unknown item: {key} is not an item of the study '{self.study.slug}'"
        if not path:
            return None, "empty 'image' value (or give the 'item' column)"
        item = self.by_path.get(path) or self.by_key.get(path)
        if item is None:
            return None, f"unknown image: {path} is not an image of the study '{self.study.slug}'"
        return item, None

    def question(self, key: str, item: _ItemRef) -> tuple[Question | None, str | None]:
        if not key:
            if len(self.questions) != 1:
                return None, f"the study asks {len(self.questions)} questions: give the 'question' column"
            key = next(iter(self.questions))
        question = self.questions.get(key)
        if question is None:
            return None, f"unknown question {key!r} (questions: {', '.join(self.questions)})"
        if item.asks is not None and key not in item.asks:  # as item_questions reads question_keys
            return None, f"the item {item.key} does not ask the question {key!r}"
        return question, None


def _items_of(study: Study, refs: Iterable[_ItemRef]) -> dict[int, Item]:
    """The items of these refs by id: built from the refs without a query, or read (``_ITEM_FIELDS``
    only, a chunk of ids per query) when a question's kind reads the item."""
    unique = {ref.pk: ref for ref in refs}  # an item's second label needs it once
    alias = connection.alias
    if any(kind_of(q).reads_item for q in study_questions(study)):
        # In field order: the order from_db reads a partial row in.
        names = [f.attname for f in Item._meta.concrete_fields if f.attname in _ITEM_FIELDS]
        convert = sql.converter(Item, names)
        rows = chunk_rows(lambda where: sql.import_items(names, where), unique, "id")
        items = [Item.from_db(alias, names, convert(row)) for row in rows]
    else:
        items = [
            Item.from_db(alias, _REF_FIELDS, (r.pk, study.pk, r.key, r.question_keys))
            for r in unique.values()
        ]
    for item in items:
        item.study = study
    return {item.pk: item for item in items}


def _answer_problem(question: Question, value: str) -> str | None:
    try:
        services.answer_validate(question, value)
    except AnnotateError:
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"unknown label {shown!r} for {question.key} (valid labels: {', '.join(question.values)})"
    return None


# --- labels ----------------------------------------------------------------------------------


class _LabelRow(NamedTuple):
    """One label of a labels file (a tuple: cheaper than a dataclass by the million)."""

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


def _users_ensure(usernames: list[str], *, group: str = "") -> dict[str, User]:
    """Users by name; missing ones created in the given order (unusable password, in ``group``)."""
    user_model = get_user_model()
    users = {u.get_username(): u for u in user_model.objects.filter(username__in=usernames)}
    missing = [name for name in usernames if name not in users]
    role = Group.objects.get_or_create(name=group)[0] if group and missing else None
    for name in missing:
        users[name] = user_model.objects.create_user(username=name)
        if role is not None:
            users[name].groups.add(role)
    return users


class _CreationOrder:
    """Usernames in an order that keeps each item's order of annotators (for re-imported studies)."""

    def __init__(self) -> None:
        self.first_seen: dict[str, int] = {}
        self.edges: set[tuple[str, str]] = set()
        self.by_item: dict[tuple[int, int], list[str]] = {}

    def add(self, username: str, item_id: int, question_id: int) -> None:
        self.first_seen.setdefault(username, len(self.first_seen))
        names = self.by_item.setdefault((item_id, question_id), [])
        self.edges.update((name, username) for name in names)
        names.append(username)

    def order(self) -> list[str]:
        sorter: TopologicalSorter[str] = TopologicalSorter()
        for name in self.first_seen:
            sorter.add(name)
        for before, after in self.edges:
            sorter.add(after, before)
        try:
            sorter.prepare()
        except CycleError:
            return sorted(self.first_seen, key=self.first_seen.__getitem__)
        order: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=self.first_seen.__getitem__)
            order += ready
            sorter.done(*ready)
        return order


def _role_problems(study: Study, first_rows: dict[str, _LabelRow]) -> list[RejectedRow]:
    """The first row of each researcher or admin named who is not an annotator of the study."""
    users = {u.get_username(): u for u in in_rows(get_user_model().objects, "username", sorted(first_rows))}
    members = set(study.annotators.values_list("pk", flat=True))
    problems = []
    for username, row in sorted(first_rows.items(), key=lambda pair: pair[1].number):
        user = users.get(username)
        if user is None or user.pk in members:
            continue
        if permissions.is_researcher(user):
            role = "an admin" if permissions.is_admin(user) else "a researcher"
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


class _AnswersImporter(Importer[Any, Any]):
    """What the labels and ground-truth imports share: rows resolved to item and question, checked."""

    def __init__(self, study: Study, csv_path: str | os.PathLike[str]) -> None:
        self.study, self.csv_path = study, csv_path
        self.items = _Items(study)
        self.seen: dict[Any, int] = {}  # the file's own duplicates: key → row number

    def problem(self, row: Any, item: _ItemRef, question: Question) -> str | None:
        raise NotImplementedError

    def keep(self, row: Any, item: _ItemRef, question: Question) -> None:
        """Note a good row (before it is written)."""

    def value_problem(self, question: Question, value: str) -> str | None:
        if len(value) > LABEL_VALUE_MAX_CHARS:
            return f"the label is longer than {LABEL_VALUE_MAX_CHARS} characters"
        return self.items.answer_problem(question, value)

    def duplicate(self, key: Any, number: int, same: str) -> str | None:
        """The problem of a row whose ``key`` an earlier row of the file had; else notes it."""
        if key in self.seen:
            return f"duplicate row: same {same} as row {self.seen[key]}"
        self.seen[key] = number
        return None

    def check_batch(self, parsed: list[Any], summary: ImportSummary) -> list[tuple[Any, _ItemRef, int]]:
        self.items.load(
            {r.item_key for r in parsed if r.item_key}, {r.path for r in parsed if not r.item_key}
        )
        good = []
        for row in parsed:
            question = None
            item, problem = self.items.item(row.item_key, row.path)
            if item is not None:
                question, problem = self.items.question(row.question, item)
                if question is not None:
                    problem = self.problem(row, item, question)
            if problem:
                summary.rejected.append(RejectedRow(row.number, row.shown, problem))
                continue
            assert item is not None
            assert question is not None
            self.keep(row, item, question)
            good.append((row, item, question.pk))
        return good


class _LabelsImporter(_AnswersImporter):
    kind = "labels"

    def __init__(self, study: Study, csv_path: str | os.PathLike[str], add_annotators: bool) -> None:
        super().__init__(study, csv_path)
        self.add_annotators = add_annotators
        self.creation = _CreationOrder()
        self.first_rows: dict[str, _LabelRow] = {}  # each username's first row
        # The (item, question)s of the file that have an agreed final answer before the import.
        self.agreed_before: set[tuple[int, int]] = set()
        self.wide: list[int] = []  # the export's annotator_i columns, by i; [] for the long format
        self.where = "image"

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        header = csv_header(self.csv_path)
        if "annotator" in header or not any(_WIDE_RE.match(c) for c in header):
            self.where = _where(header)
            required = [self.where, "annotator", "label"]
        else:
            self.wide = sorted({int(m.group(2)) for c in header if (m := _WIDE_RE.match(c))})
            self.where = "item" if "item" in header else "image"
            required = [self.where] + [f"{kind}_{i}" for i in self.wide for kind in ("annotator", "label")]
        return csv_rows_stream(self.csv_path, required=required)[1]

    def parse_row(self, number: int, row: dict[str, str]) -> _LabelRow | list[Any]:
        item, path, question = row.get("item", ""), row.get("image", ""), row.get("question", "")
        if not self.wide:
            return _LabelRow(
                number, item, path, question, row["annotator"], row["label"], row.get("reason", "")
            )
        found: list[Any] = []
        for i in self.wide:
            username, value = row[f"annotator_{i}"], row[f"label_{i}"]
            if not username and not value:
                continue
            if not username:
                # An empty label with its annotator is a label (kinds may take one); without one, not.
                message = f"label_{i} is set but annotator_{i} is empty"
                found.append(RejectedRow(number, row.get(self.where, ""), message))
                continue
            reason = row.get(f"reason_{i}", "")
            found.append(
                _LabelRow(number, item, path, question, username, value, reason, f"reason_{i}" in row)
            )
        return found

    def problem(self, row: _LabelRow, item: _ItemRef, question: Question) -> str | None:
        if not _USERNAME_RE.match(row.username):
            return f"invalid annotator username {row.username!r}"
        problem = self.value_problem(question, row.value)
        if problem:
            return problem
        if "\x00" in row.reason:
            return "the reason contains a NUL character"
        if len(row.reason) > services.REASON_MAX_CHARS:
            return f"the reason is longer than {services.REASON_MAX_CHARS} characters"
        key = (item.pk, question.id, row.username)
        return self.duplicate(key, row.number, "item, question and annotator")

    def keep(self, row: _LabelRow, item: _ItemRef, question: Question) -> None:
        self.creation.add(row.username, item.pk, question.id)
        self.first_rows.setdefault(row.username, row)

    def check_batch(
        self, parsed: list[_LabelRow], summary: ImportSummary
    ) -> list[tuple[_LabelRow, _ItemRef, int]]:
        good = super().check_batch(parsed, summary)
        self.agreed_before |= _agreed_finals({(item.pk, question_id) for _, item, question_id in good})
        return good

    def check_end(self, summary: ImportSummary) -> None:
        if not self.add_annotators:
            summary.rejected.extend(_role_problems(self.study, self.first_rows))

    def write_begin(self) -> None:
        self.users = _users_ensure(self.creation.order(), group=permissions.ANNOTATOR)
        self.questions = {q.pk: q for q in study_questions(self.study)}

    def write_batch(self, good: list[tuple[_LabelRow, _ItemRef, int]], summary: ImportSummary) -> None:
        """Write one batch of checked rows through ``services.labels_import_batch``."""
        label_rows = list(chunk_rows(sql.import_labels, sorted({item.pk for _, item, _ in good}), "item_id"))
        # The stored (value, reason) of the batch's labels by (item, question, annotator).
        before = {
            (item, question, annotator): (value, reason)
            for _, item, question, annotator, value, reason in label_rows
        }
        todo: list[tuple[_LabelRow, _ItemRef, Question, User, str]] = []
        for row, item, question_id in good:
            annotator = self.users[row.username]
            question = self.questions[question_id]
            stored = before.get((item.pk, question_id, annotator.id))
            reason = row.reason
            if stored == (row.value, reason):
                summary.duplicates += 1  # the service would change nothing
                continue
            if not row.has_reason:
                if stored is not None and stored[0] == row.value:
                    # An old export carries no reasons: the same value already stored keeps its own reason.
                    summary.duplicates += 1
                    continue
                if (question.choice(row.value) or {}).get("requires_reason"):
                    reason = REASON_NOT_EXPORTED
            todo.append((row, item, question, annotator, reason))
        # Only the rows that reach the service need their items (none on a re-run).
        by_id = _items_of(self.study, (item for _, item, _, _, _ in todo))
        outcomes = services.labels_import_batch(
            study=self.study,
            rows=[
                services.LabelToImport(by_id[item.pk], question, annotator, row.value, reason)
                for row, item, question, annotator, reason in todo
            ],
            labels_read=label_rows,
        )
        for (row, *_), outcome in zip(todo, outcomes, strict=True):
            if isinstance(outcome, AnnotateError):
                summary.rejected.append(RejectedRow(row.number, row.shown, f"{row.username}: {outcome}"))
            elif outcome == "unchanged":
                summary.duplicates += 1
            elif outcome == "changed":
                summary.changed += 1
            else:
                summary.accepted += 1

    def write_end(self, summary: ImportSummary) -> None:
        gone = self.agreed_before - _agreed_finals(self.agreed_before)
        several = len(self.questions) > 1
        keys = dict(in_rows(Item.objects, "pk", (i for i, _ in gone), "pk", "key"))
        summary.reopened = [
            keys[item_id] + (f" ({self.questions[question_id].key})" if several else "")
            for item_id, question_id in sorted(gone)
        ]


def labels_import(
    *,
    study: Study,
    csv_path: str | os.PathLike[str],
    add_annotators: bool = False,
    dry_run: bool = False,
    stage_progress: Callable[[str, int], None] | None = None,
    user: User | None = None,
) -> ImportSummary:
    """Import annotators' labels into ``study`` from a CSV, all or nothing (``import_labels --help``)."""
    return import_run(
        _LabelsImporter(study, csv_path, add_annotators),
        summary=ImportSummary(dry_run=dry_run, reports=("changed",)),
        source=csv_path,
        study=study,
        user=user,
        progress=stage_progress,
    )


def _agreed_finals(pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The (item, question) pairs among ``pairs`` that have an agreed final answer."""
    items = sorted({item for item, _ in pairs})
    rows = chunk_rows(sql.import_agreed_finals, items, "item_id", FinalLabelSource.AGREED.value)
    return {pair for pair in map(tuple, rows) if pair in pairs}


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


class _TruthImporter(_AnswersImporter):
    kind = "ground truth"

    def __init__(self, study: Study, csv_path: str | os.PathLike[str], user: User | None) -> None:
        super().__init__(study, csv_path)
        self.user = user
        self.decider_names: set[str] = set()
        self.from_export = False
        self.label_column = "label"

    def rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        header = csv_header(self.csv_path)
        self.from_export = "label" not in header and "final_label" in header
        self.label_column = "final_label" if self.from_export else "label"
        return csv_rows_stream(self.csv_path, required=(_where(header), self.label_column))[1]

    def parse_row(self, number: int, raw: dict[str, str]) -> _TruthRow | None:
        value = raw[self.label_column]
        if self.from_export and not value:
            return None  # an export's answer without a final label
        return _TruthRow(
            number,
            raw.get("item", ""),
            raw.get("image", ""),
            raw.get("question", ""),
            value,
            raw.get("note", ""),
            raw.get("resolved_by", ""),
        )

    def problem(self, row: _TruthRow, item: _ItemRef, question: Question) -> str | None:
        if not row.value:
            return "empty label"
        problem = self.value_problem(question, row.value)
        if problem:
            return problem
        if "\x00" in row.note:
            return "the note contains a NUL character"
        if row.decided_by and not _USERNAME_RE.match(row.decided_by):
            return f"invalid resolved_by username {row.decided_by!r}"
        return self.duplicate((item.pk, question.pk), row.number, "item and question")

    def keep(self, row: _TruthRow, item: _ItemRef, question: Question) -> None:
        if row.decided_by:
            self.decider_names.add(row.decided_by)

    def write_begin(self) -> None:
        self.deciders = _users_ensure(sorted(self.decider_names))
        self.questions = {q.pk: q for q in study_questions(self.study)}

    def write_batch(self, good: list[tuple[_TruthRow, _ItemRef, int]], summary: ImportSummary) -> None:
        by_id = _items_of(self.study, (item for _, item, _ in good))
        finals = in_rows(FinalLabel.objects, "item_id", (item.pk for _, item, _ in good), *FINAL_FIELDS)
        current = {(item_id, question_id): (value, note) for item_id, question_id, value, note in finals}
        for row, item, question_id in good:
            if current.get((item.pk, question_id)) == (row.value, row.note):
                summary.duplicates += 1
                continue
            try:
                services.final_label_set(
                    item=by_id[item.pk],
                    question=self.questions[question_id],
                    value=row.value,
                    decided_by=self.deciders[row.decided_by] if row.decided_by else self.user,
                    note=row.note,
                )
            except AnnotateError as exc:
                summary.rejected.append(RejectedRow(row.number, row.shown, str(exc)))
                continue
            summary.accepted += 1


def ground_truth_import(
    *,
    study: Study,
    csv_path: str | os.PathLike[str],
    user: User | None,
    dry_run: bool = False,
    stage_progress: Callable[[str, int], None] | None = None,
) -> ImportSummary:
    """Set final answers of ``study``'s items from a CSV, all or nothing (``import_ground_truth --help``)."""
    return import_run(
        _TruthImporter(study, csv_path, user),
        summary=ImportSummary(dry_run=dry_run),
        source=csv_path,
        study=study,
        user=user,
        progress=stage_progress,
    )
