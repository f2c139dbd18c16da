"""Labels and ground truth in and out of a study as files.

- ``ground_truth_rows`` / ``ground_truth_export``: one row per (item, question) of the study
  (unlabelled items included), columns ``item, question, image, [input_image, output_image,]
  t2i_model, category, word, prompt, seed, annotator_1, label_1, reason_1, …, annotator_N,
  label_N, reason_N, final_label, resolved_by, note``. ``image`` is the item's first image (its
  import path); pairs also name their seed and edit. Used by the ``export_ground_truth``
  command, the admin and the API.
- ``labels_import`` / ``ground_truth_import``: read a CSV, check every row first, report every
  bad row, and write only when the whole file is good, in one transaction, through
  ``annotate.services.labels_import_batch`` / ``final_label_set`` (the label rules live there).

Both imports also accept the export's own CSV, so export → import reproduces a study: the
wide ``annotator_i`` / ``label_i`` / ``reason_i`` columns are read as labels and ``final_label``
as the final answer.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from typing import IO, Any, NamedTuple

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.db.models import Count, F

from annotate import services, sql
from annotate.errors import AnnotateError, ImportRejected
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    Label,
    LabelRevision,
)
from studies import permissions
from studies.batching import IsIn, batches, import_batch_rows, in_chunk_size, in_chunks, is_in
from studies.csvio import safe_dict_writer
from studies.ingest import ImportSummary, RejectedRow, csv_rows_stream
from studies.models import ImageRole, Item, ItemImage, Question, QuestionKind, Study
from studies.protocols import protocol_spec
from studies.selectors import item_questions, study_questions, study_slug_hint
from studies.selectors import study_by_slug as _study_by_slug

EXPORT_FORMATS = ("csv", "json")
HEAD_COLUMNS = ("item", "question", "image")
PAIR_COLUMNS = ("input_image", "output_image")
ITEM_COLUMNS = ("t2i_model", "category", "word", "prompt", "seed")
TAIL_COLUMNS = ("final_label", "resolved_by", "note", "posterior")
# Old export files carry no reasons: a label that needs one gets this text on re-import.
REASON_NOT_EXPORTED = "(imported from a ground-truth export, which carries no reasons)"
_USERNAME_RE = re.compile(r"^[\w.@+-]{1,150}$")
# Label.value's column size: a longer value is a row error, never a database error.
LABEL_VALUE_MAX_CHARS = 1000
_WIDE_RE = re.compile(r"^(annotator|label|reason)_(\d+)$")
#: The tables a label or ground-truth import writes rows into (their statistics are refreshed
#: after it: ``studies.database.database_analyze``).
LABEL_TABLES = (Label, LabelRevision, Assignment, FinalLabel, FinalLabelRevision)


# --- export --------------------------------------------------------------------------------------


def _is_pair_study(study: Study) -> bool:
    return protocol_spec(study.protocol).paired


def ground_truth_columns(n_annotators: int, *, pairs: bool = False) -> list[str]:
    """Export columns for a study with at most ``n_annotators`` labels per (item, question)."""
    middle: list[str] = []
    for i in range(1, n_annotators + 1):
        middle += [f"annotator_{i}", f"label_{i}", f"reason_{i}"]
    return [*HEAD_COLUMNS, *(PAIR_COLUMNS if pairs else ()), *ITEM_COLUMNS, *middle, *TAIL_COLUMNS]


def _labels_by_item(study: Study, item_ids: list[int]) -> dict[tuple[int, int], list[tuple[str, str, str]]]:
    # Ordered by annotator id within an item, the order agreement metrics pair labels in, so
    # label_1 / label_2 of the file are the pairs kappa is computed on.
    grouped: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
    rows = (
        Label.objects.filter(IsIn(F("item_id"), item_ids), item__study=study)
        .order_by("item_id", "question_id", "annotator_id")
        .values_list("item_id", "question_id", "annotator__username", "value", "reason")
    )
    for item_id, question_id, username, value, reason in rows:
        grouped.setdefault((item_id, question_id), []).append((username, value, reason))
    return grouped


def _annotator_columns(study: Study) -> int:
    """How many annotator columns the export has: the study's N, or the most labels any
    (item, question) has if more (one aggregate query)."""
    most = (
        Label.objects.filter(item__study=study)
        .order_by()
        .values("item_id", "question_id")
        .annotate(n=Count("id"))
        .order_by("-n")
        .values_list("n", flat=True)
        .first()
    )
    return max(study.labels_per_item, most or 0)


def ground_truth_rows_stream(
    *, study: Study, n_annotators: int | None = None, chunk: int | None = None
) -> Iterator[dict[str, Any]]:
    """``ground_truth_rows`` read a chunk of items at a time (keyset pages by item id, their
    labels, final labels and image paths in one query each), so a study of a million items is
    exported in constant memory."""
    n = n_annotators if n_annotators is not None else _annotator_columns(study)
    size = chunk or in_chunk_size()
    questions = study_questions(study)
    pairs = _is_pair_study(study)
    after = 0
    while True:
        items = list(
            Item.objects.filter(study=study, pk__gt=after).select_related("prompt").order_by("id")[:size]
        )
        if not items:
            return
        after = items[-1].pk
        ids = [item.pk for item in items]
        labels = _labels_by_item(study, ids)
        finals = {
            (f.item_id, f.question_id): f
            for f in FinalLabel.objects.filter(IsIn(F("item_id"), ids)).select_related("decided_by")
        }
        links: dict[int, dict[str, str]] = {}
        for item_id, role, path in ItemImage.objects.filter(IsIn(F("item_id"), ids)).values_list(
            "item_id", "role", "source_path"
        ):
            links.setdefault(item_id, {})[role] = path
        for item in items:
            paths = links.get(item.pk, {})
            first = (
                paths.get(ImageRole.IMAGE) or paths.get(ImageRole.INPUT) or paths.get(ImageRole.OUTPUT, "")
            )
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
                row["posterior"] = final.posterior if final else None
                yield row


def ground_truth_rows(*, study: Study) -> list[dict[str, Any]]:
    """One ordered dict of the export columns per (item, question) the study asks, by item id
    then question order.

    ``seed`` is an int or None; missing annotators and an answer without final label give "".
    The number of annotator columns is the larger of the study's N and the most labels any
    answer has. (All in memory: for a large study, ``ground_truth_rows_stream``.)
    """
    return list(ground_truth_rows_stream(study=study))


def ground_truth_export(*, study: Study, fmt: str) -> str:
    """The study's ground truth as CSV text or a JSON document.

    JSON: ``{"study": slug, "protocol", "labels": [the first question's values], "questions":
    [{"key", "text", "values"}], "columns": [...], "rows": [{column: value}]}``. Raises
    ValueError for an unknown format. (The whole text in memory: the command streams with
    ``ground_truth_write``.)
    """
    buffer = io.StringIO()
    ground_truth_write(study=study, fmt=fmt, out=buffer)
    return buffer.getvalue()


def ground_truth_write(
    *, study: Study, fmt: str, out: IO[str], progress: Callable[[int], None] | None = None
) -> int:
    """Write the export of ``ground_truth_export`` to ``out`` as it is read, a chunk of items at
    a time (constant memory, whatever the study's size); return the number of rows.
    ``progress(rows)`` is called after each chunk of rows. Raises ValueError for an unknown
    format (before writing anything)."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    n = _annotator_columns(study)
    columns = ground_truth_columns(n, pairs=_is_pair_study(study))
    rows = ground_truth_rows_stream(study=study, n_annotators=n)
    count = 0
    if fmt == "json":
        questions = study_questions(study)
        head = {
            "study": study.slug,
            "protocol": study.protocol,
            "labels": questions[0].values if questions else [],
            "questions": [{"key": q.key, "text": q.text, "values": q.values} for q in questions],
            "columns": columns,
        }
        # The text json.dumps(document, indent=2) gives, written a row at a time.
        text = json.dumps(head, ensure_ascii=False, indent=2)
        out.write(text[: -len("\n}")] + ',\n  "rows": [')
        for row in rows:
            body = json.dumps(row, ensure_ascii=False, indent=2).replace("\n", "\n    ")
            out.write(("\n    " if count == 0 else ",\n    ") + body)
            count += 1
            if progress and count % 1000 == 0:
                progress(1000)
        out.write("\n  ]\n}\n" if count else "]\n}\n")
    else:
        writer = safe_dict_writer(out, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
            count += 1
            if progress and count % 1000 == 0:
                progress(1000)
    if progress and count % 1000:
        progress(count % 1000)
    return count


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


# What the label rules read of an item (its key in messages, the questions it asks, its boxes):
# loading only these, with the study shared, halves an import's reads.
_ITEM_FIELDS = ("id", "key", "study_id", "question_keys", "metadata")
# Those an item ref holds, in the model's field order (the order from_db reads a partial row in).
_REF_FIELDS = ["id", "study_id", "key", "question_keys"]


class _ItemRef(NamedTuple):
    """What the checks read of an item: its id, its key (for messages), its ``question_keys``
    and the keys of the questions it asks (None: every question of the study, as
    ``item_questions`` reads an empty ``question_keys``). A plain tuple: a model instance per
    row costs more than the checks."""

    pk: int
    key: str
    question_keys: list[str]
    asks: frozenset[str] | None


def _item_ref(pk: int, key: str, question_keys: Any) -> _ItemRef:
    return _ItemRef(pk, key, question_keys, frozenset(question_keys) if question_keys else None)


class _Items:
    """Resolve a row's item: by ``item`` (the item key) or, for one-image items, by ``image`` (the
    path it was imported under); and its question: by ``question``, or the study's only one.

    The items a batch of rows names are loaded with ``load`` (a few queries, every ``IN``
    list under the variable limit) and forgotten at the next batch, so a study of a million
    items is never held at once."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.by_key: dict[str, _ItemRef] = {}
        self.by_path: dict[str, _ItemRef] = {}
        self.questions = {q.key: q for q in study_questions(study)}
        # The batch's answers checked so far, by (question, value): a file repeats a few answers.
        self.answer_problems: dict[tuple[str, str], str | None] = {}

    def load(self, keys: set[str], paths: set[str]) -> None:
        """Look up the items of one batch of rows: by key, and by path (or key) for one-image items.
        Plain SQL (``ItemImage.objects.filter(item__study=…, role="image", source_path__in=…)``
        and ``Item.objects.filter(study=…, key__in=…)``): the ORM prepares every value of an
        ``__in`` list and builds an instance per row, most of the time a batch takes."""
        self.by_key, self.by_path, self.answer_problems = {}, {}, {}
        # A value with a NUL character names no item (and PostgreSQL refuses it in a query).
        keys = {key for key in keys if "\x00" not in key}
        paths = {path for path in paths if "\x00" not in path}
        convert = sql.converter(Item, ["question_keys"])
        with connection.cursor() as cursor:
            for chunk in in_chunks(sorted(paths)):
                where, params = is_in("l.source_path", chunk, array="text")
                cursor.execute(
                    sql.import_items_by_path(where), [self.study.pk, ImageRole.IMAGE.value, *params]
                )
                for path, pk, key, question_keys in cursor.fetchall():
                    self.by_path[path] = _item_ref(pk, key, *convert([question_keys]))
            # A path no image was imported under may be an item key (item() falls back to it).
            for chunk in in_chunks(sorted(keys | (paths - self.by_path.keys()))):
                where, params = is_in(connection.ops.quote_name("key"), chunk, array="text")
                cursor.execute(sql.import_items_by_key(where), [self.study.pk, *params])
                for pk, key, question_keys in cursor.fetchall():
                    self.by_key[key] = _item_ref(pk, key, *convert([question_keys]))

    def item(self, key: str, path: str) -> tuple[_ItemRef | None, str | None]:
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

    def answer_problem(self, question: Question, value: str) -> str | None:
        """``_answer_problem``, once per distinct (question, value) of the batch."""
        key = (question.key, value)
        if key not in self.answer_problems:
            self.answer_problems[key] = _answer_problem(question, value)
        return self.answer_problems[key]


# Checked rows an import keeps in memory between its passes before it spills them to disk:
# about 0.5 kB each, so at most some 50 MB.
STAGED_IN_MEMORY_ROWS = 100_000


class _Staged:
    """Checked rows kept between the checking pass and the writing pass: in memory for a file
    of up to ``STAGED_IN_MEMORY_ROWS`` rows, beyond that on disk (every batch pickled to a
    temporary file): a file of a million rows costs disk, not memory. (Pickling is a twentieth
    of a 40,000-label import: spared where memory is cheap.)"""

    def __init__(self) -> None:
        self.held: list[list[Any]] = []
        self.rows = 0
        self.file: Any = None  # a temporary file once spilled; closed by close()

    def add(self, batch: list[Any]) -> None:
        if not batch:
            return
        self.rows += len(batch)
        if self.file is None and self.rows <= STAGED_IN_MEMORY_ROWS:
            self.held.append(batch)
            return
        if self.file is None:
            # Closed by close(), which the imports call in a finally block.
            self.file = tempfile.TemporaryFile(prefix="biaslab-import-")  # noqa: SIM115
            for held in self.held:
                pickle.dump(held, self.file, protocol=pickle.HIGHEST_PROTOCOL)
            self.held = []
        pickle.dump(batch, self.file, protocol=pickle.HIGHEST_PROTOCOL)

    def batches(self) -> Iterator[list[Any]]:
        if self.file is None:
            yield from self.held
            return
        self.file.seek(0)
        while True:
            try:
                yield pickle.load(self.file)
            except EOFError:
                return

    def close(self) -> None:
        self.held = []
        if self.file is not None:
            self.file.close()


def _items_of(study: Study, refs: Iterable[_ItemRef]) -> dict[int, Item]:
    """The items of these refs, by id, as the label rules read them: made from what the
    checking pass read (``_ITEM_FIELDS`` but the metadata, the rest deferred as ``only()``
    leaves it), without reading them again. Only a box question's check reads an item's
    metadata (its boxes): a study that asks one reads its items again, with it."""
    if any(q.kind == QuestionKind.BOXES for q in study_questions(study)):
        return _items_by_id(study, dict.fromkeys(ref.pk for ref in refs))  # each item once
    alias = connection.alias
    items = {}
    for ref in refs:
        if ref.pk in items:  # an item's second label
            continue
        item = Item.from_db(alias, _REF_FIELDS, (ref.pk, study.pk, ref.key, ref.question_keys))
        item.study = study
        items[ref.pk] = item
    return items


def _items_by_id(study: Study, ids: Iterable[int]) -> dict[int, Item]:
    """The items with these ids and every field the label rules read (``_ITEM_FIELDS``, the
    boxes in the metadata included), a chunk of ids per query: instances as
    ``Item.objects.filter(pk__in=…).only(*_ITEM_FIELDS)`` gives them, read with plain SQL (the
    ORM's preparing of every ``__in`` value costs more than the query)."""
    items = {}
    # In field order: the order from_db reads a partial row in.
    names = [f.attname for f in Item._meta.concrete_fields if f.attname in _ITEM_FIELDS]
    convert = sql.converter(Item, names)
    alias = connection.alias
    with connection.cursor() as cursor:
        for chunk in in_chunks(ids):
            where, params = is_in("id", chunk)
            cursor.execute(sql.import_items(names, where), params)
            for row in cursor.fetchall():
                item = Item.from_db(alias, names, convert(row))
                item.study = study
                items[item.pk] = item
    return items


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


class _LabelRow(NamedTuple):
    """One label of a labels file (a tuple: a million of them are made, pickled and read back,
    and a frozen dataclass costs three times as much to build)."""

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


def _label_rows(csv_path: str | os.PathLike[str]) -> Iterator[_LabelRow | RejectedRow]:
    """Read a labels file in the long format (image or item, annotator, label, optional reason
    and question) or the export's wide format (annotator_i, label_i[, reason_i]), lazily: label
    rows, and rows that cannot be read."""
    header = _header(csv_path)
    if "annotator" in header or not any(_WIDE_RE.match(c) for c in header):
        where = "item" if "item" in header and "image" not in header else "image"
        _, rows = csv_rows_stream(csv_path, required=(where, "annotator", "label"))
        for number, row in rows:
            if "__error__" in row:
                yield RejectedRow(number, "", row["__error__"])
                continue
            yield _LabelRow(
                number,
                row.get("item", ""),
                row.get("image", ""),
                row.get("question", ""),
                row["annotator"],
                row["label"],
                row.get("reason", ""),
            )
        return
    yield from _wide_label_rows(csv_path, header)


def _wide_label_rows(
    csv_path: str | os.PathLike[str], header: list[str]
) -> Iterator[_LabelRow | RejectedRow]:
    indexes = sorted({int(m.group(2)) for c in header if (m := _WIDE_RE.match(c))})
    where = "item" if "item" in header else "image"
    required = [where] + [f"{kind}_{i}" for i in indexes for kind in ("annotator", "label")]
    _, rows = csv_rows_stream(csv_path, required=required)
    for number, row in rows:
        if "__error__" in row:
            yield RejectedRow(number, "", row["__error__"])
            continue
        for i in indexes:
            username, value = row[f"annotator_{i}"], row[f"label_{i}"]
            if not username and not value:
                continue
            if not username:
                # An annotator with an empty label is a label (a "classes" question answered with
                # no class); a label without its annotator is not.
                yield RejectedRow(number, row.get(where, ""), f"label_{i} is set but annotator_{i} is empty")
                continue
            yield _LabelRow(
                number,
                row.get("item", ""),
                row.get("image", ""),
                row.get("question", ""),
                username,
                value,
                row.get(f"reason_{i}", ""),
                has_reason=f"reason_{i}" in row,
            )


def _label_row_problem(
    row: _LabelRow, items: _Items, seen: dict[tuple[int, int, str], int]
) -> tuple[str | None, _ItemRef | None, Question | None]:
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
    problem = items.answer_problem(question, row.value)
    if problem:
        return problem, None, None
    if "\x00" in row.reason:
        return "the reason contains a NUL character", None, None
    if len(row.reason) > services.REASON_MAX_CHARS:
        return f"the reason is longer than {services.REASON_MAX_CHARS} characters", None, None
    key = (item.pk, question.id, row.username)
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


class _CreationOrder:
    """Usernames in an order that keeps, on every item, the order annotators appear in, fed
    one row at a time.

    Exports list an item's annotators by user id; creating missing users in an order
    consistent with every row makes a re-imported study pair its labels the same way, so
    kappa (which depends on which label is rater 1) comes out identical. Holds the distinct
    pairs of names, not the rows.
    """

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
    """Rows naming an existing researcher's or admin's account that is not an annotator of the
    study: importing would silently make that account one. ``first_rows``: each username's
    first row. One query per chunk of users, one for the study's annotators; the rows of each
    account are named once (first row)."""
    users = {
        u.get_username(): u
        for chunk in in_chunks(sorted(first_rows))
        for u in get_user_model().objects.filter(username__in=chunk)
    }
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


def labels_import(
    *,
    study: Study,
    csv_path: str | os.PathLike[str],
    add_annotators: bool = False,
    dry_run: bool = False,
    stage_progress: Callable[[str, int], None] | None = None,
) -> ImportSummary:
    """Import annotators' labels for items of ``study`` from a CSV.

    Columns ``image`` (the manifest path of a one-image item) or ``item`` (the item key),
    ``annotator`` (username; created as an annotator if missing), ``label``, optional
    ``reason`` and ``question`` (required when the study asks more than one) — or the export's
    wide columns. Every row is checked first (unknown item or question, a question the item
    does not ask, unknown label, duplicate row, bad username); if any row is bad nothing is
    written and all bad rows are reported. Then every label goes through
    ``services.labels_import_batch`` (the rules of ``label_import``, a batch of rows at a time)
    in one transaction; a row the service refuses (item already has N annotators, missing
    reason, final label already decided) rolls the whole file back.
    Re-importing the same file changes nothing (rows count as duplicates).

    The summary counts new labels (``accepted``), labels whose answer or reason changed
    (``changed``) and the (item, question)s whose agreed final answer the change undid, back to
    disputed (``reopened``). An existing researcher's or admin's account that is not yet an
    annotator of the study is refused (naming row and user) unless ``add_annotators``. With
    ``dry_run`` the whole import runs and is rolled back: the summary says what it would do.

    The file is streamed in two passes: the first checks it a batch of rows at a time
    (``studies.batching``) and stages the good rows in a temporary file; the second writes
    them, a batch at a time (their stored labels read in one query, so an unchanged label costs
    no service call), in the one transaction. ``stage_progress(stage, rows)`` is called after
    each batch (``"checked"``, ``"written"``).
    """
    summary = ImportSummary(dry_run=dry_run, reports=("changed",))
    items = _Items(study)
    seen: dict[tuple[int, int, str], int] = {}
    creation = _CreationOrder()
    first_rows: dict[str, _LabelRow] = {}
    # The (item, question)s of the file that have an agreed final answer before the import.
    agreed_before: set[tuple[int, int]] = set()
    staged = _Staged()
    try:
        for batch in batches(_label_rows(csv_path), import_batch_rows()):
            rows = [row for row in batch if isinstance(row, _LabelRow)]
            summary.rejected.extend(row for row in batch if isinstance(row, RejectedRow))
            items.load({r.item_key for r in rows if r.item_key}, {r.path for r in rows if not r.item_key})
            good = []
            for row in rows:
                problem, item, question = _label_row_problem(row, items, seen)
                if problem:
                    summary.rejected.append(RejectedRow(row.number, row.shown, problem))
                    continue
                assert item is not None
                assert question is not None
                creation.add(row.username, item.pk, question.id)
                first_rows.setdefault(row.username, row)
                good.append((row, item, question.id))
            agreed_before |= _agreed_finals({(item.pk, question_id) for _, item, question_id in good})
            if not summary.rejected:
                staged.add(good)
            if stage_progress:
                stage_progress("checked", len(batch))
        if not add_annotators:
            summary.rejected.extend(_role_problems(study, first_rows))
        if summary.rejected:
            return _refuse_all(summary)
        try:
            with transaction.atomic():
                users = _users_ensure(creation.order())
                questions = {q.pk: q for q in study_questions(study)}
                for good in staged.batches():
                    _labels_write(study, good, questions, users, summary)
                    if stage_progress:
                        stage_progress("written", len(good))
                if summary.rejected:
                    raise _Rollback
                gone = agreed_before - _agreed_finals(agreed_before)
                several = len(questions) > 1
                keys = {pk: key for pk, key in _item_keys(pair[0] for pair in gone)}
                summary.reopened = [
                    keys[item_id] + (f" ({questions[question_id].key})" if several else "")
                    for item_id, question_id in sorted(gone)
                ]
                if dry_run:
                    raise _DryRunDone
        except _Rollback:
            return _refuse_all(summary)
        except _DryRunDone:
            pass
        return summary
    finally:
        staged.close()


def _item_keys(ids: Iterable[int]) -> Iterator[tuple[int, str]]:
    for chunk in in_chunks(ids):
        yield from Item.objects.filter(pk__in=chunk).values_list("pk", "key")


def _labels_before(
    good: list[tuple[_LabelRow, _ItemRef, int]],
) -> tuple[dict[tuple[int, int, int], tuple[str, str]], list[tuple[Any, ...]]]:
    """The stored (value, reason) of the labels on the items of a batch of rows, by (item,
    question, annotator), and the rows as read (``labels_import_batch`` need not read them
    again on SQLite): one query per chunk of items (plain SQL, as ``_items_by_id``)."""
    stored: dict[tuple[int, int, int], tuple[str, str]] = {}
    rows: list[tuple[Any, ...]] = []
    with connection.cursor() as cursor:
        for chunk in in_chunks(sorted({item.pk for _, item, _ in good})):
            where, params = is_in("item_id", chunk)
            cursor.execute(sql.import_labels(where), params)
            read = cursor.fetchall()
            rows += read
            for _, item_id, question_id, annotator_id, value, reason in read:
                stored[(item_id, question_id, annotator_id)] = (value, reason)
    return stored, rows


def _agreed_finals(pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The (item, question) pairs among ``pairs`` that have an agreed final answer (one query
    per chunk of items, plain SQL as ``_items_by_id``)."""
    found: set[tuple[int, int]] = set()
    with connection.cursor() as cursor:
        for chunk in in_chunks(sorted({item for item, _ in pairs})):
            where, params = is_in("item_id", chunk)
            cursor.execute(sql.import_agreed_finals(where), [FinalLabelSource.AGREED.value, *params])
            found.update(pair for pair in map(tuple, cursor.fetchall()) if pair in pairs)
    return found


def _labels_write(
    study: Study,
    good: list[tuple[_LabelRow, _ItemRef, int]],
    questions: dict[int, Question],
    users: dict[str, User],
    summary: ImportSummary,
) -> None:
    """Write one batch of checked rows through ``services.labels_import_batch`` (the rules of
    ``label_import``, a few statements per batch). A label stored as the row gives it costs no
    service work; a refused row is reported by number."""
    before, label_rows = _labels_before(good)
    todo: list[tuple[_LabelRow, _ItemRef, Question, User, str]] = []
    for row, item, question_id in good:
        annotator = users[row.username]
        question = questions[question_id]
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
    by_id = _items_of(study, (item for _, item, _, _, _ in todo))
    outcomes = services.labels_import_batch(
        study=study,
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
    *,
    study: Study,
    csv_path: str | os.PathLike[str],
    user: User | None,
    dry_run: bool = False,
    stage_progress: Callable[[str, int], None] | None = None,
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
    Streamed in two passes, as ``labels_import``.
    """
    header = _header(csv_path)
    from_export = "label" not in header and "final_label" in header
    label_column = "final_label" if from_export else "label"
    where = "item" if "item" in header and "image" not in header else "image"
    _, rows = csv_rows_stream(csv_path, required=(where, label_column))
    summary = ImportSummary(dry_run=dry_run)
    items = _Items(study)
    seen: dict[tuple[int, int], int] = {}
    decider_names: set[str] = set()
    staged = _Staged()
    try:
        for batch in batches(rows, import_batch_rows()):
            truths: list[_TruthRow] = []
            for number, raw in batch:
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
                truths.append(row)
            items.load({r.item_key for r in truths if r.item_key}, {r.path for r in truths if not r.item_key})
            good = []
            for row in truths:
                problem, item, question = _truth_row_problem(row, items, seen)
                if problem:
                    summary.rejected.append(RejectedRow(row.number, row.shown, problem))
                    continue
                assert item is not None
                assert question is not None
                if row.decided_by:
                    decider_names.add(row.decided_by)
                good.append((row, item, question.pk))
            if not summary.rejected:
                staged.add(good)
            if stage_progress:
                stage_progress("checked", len(batch))
        if summary.rejected:
            return _refuse_all(summary)
        try:
            with transaction.atomic():
                deciders = _deciders_ensure(sorted(decider_names))
                questions = {q.pk: q for q in study_questions(study)}
                for good in staged.batches():
                    by_id = _items_of(study, (item for _, item, _ in good))
                    current = {
                        (item_id, question_id): (value, note)
                        for chunk in in_chunks(item.pk for _, item, _ in good)
                        for item_id, question_id, value, note in FinalLabel.objects.filter(
                            item_id__in=chunk
                        ).values_list("item_id", "question_id", "value", "note")
                    }
                    for row, item, question_id in good:
                        decided_by = deciders[row.decided_by] if row.decided_by else user
                        _truth_write(
                            row,
                            by_id[item.pk],
                            questions[question_id],
                            decided_by,
                            summary,
                            current.get((item.pk, question_id)),
                        )
                    if stage_progress:
                        stage_progress("written", len(good))
                if summary.rejected:
                    raise _Rollback
                if dry_run:
                    raise _DryRunDone
        except _Rollback:
            return _refuse_all(summary)
        except _DryRunDone:
            pass
        return summary
    finally:
        staged.close()


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
) -> tuple[str | None, _ItemRef | None, Question | None]:
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
    problem = items.answer_problem(question, row.value)
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
    row: _TruthRow,
    item: Item,
    question: Question,
    user: User | None,
    summary: ImportSummary,
    current: tuple[str, str] | None,
) -> None:
    """Set one final label through the service; ``current``: its stored (value, note), if any."""
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
            f"no study with slug '{slug}' (existing studies: {known or 'none yet'}); "
            f"{study_slug_hint(slug, known)}"
        ),
    )
