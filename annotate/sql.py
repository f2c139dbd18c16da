"""The key press's and the label import's SQL, written out once per database vendor, and model
instances built from their rows with the ORM's own conversions (docs/explanation/key-press.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from studies.models import GoldAnswer, Image, Item, ItemImage, Prompt, Question, Study

M = TypeVar("M", bound=Model)
Converter = Callable[[Any, Any, Any], Any]
_Column = tuple[Any, list[Converter]]  # (the field's Col expression, its converters)


def columns(model: type[Model], alias: str) -> str:
    """``alias.col1, alias.col2 …`` for every concrete field of ``model``, in field order (the
    order ``from_row`` reads them in)."""
    return ", ".join(f"{alias}.{connection.ops.quote_name(_column(f))}" for f in model._meta.concrete_fields)


def _column(field: Any) -> str:
    column: str = field.column
    return column


def width(model: type[Model]) -> int:
    """How many columns ``columns(model, …)`` selects."""
    return len(model._meta.concrete_fields)


def _converters(model: type[Model]) -> list[_Column]:
    """The backend's and the fields' converters of ``model``'s concrete fields, as the ORM's
    compiler would apply them. Kept on the connection object: converters are bound to it and a
    connection belongs to one thread."""
    # connections[...] is this thread's connection object (``connection`` is a proxy shared by all
    # threads, so its own __dict__ would mix threads' converters).
    cache: dict[type[Model], list[_Column]] = connections[DEFAULT_DB_ALIAS].__dict__.setdefault(
        "_biaslab_converters", {}
    )
    found = cache.get(model)
    if found is None:
        found = []
        for field in model._meta.concrete_fields:
            col = field.get_col(model._meta.db_table)
            found.append((col, connection.ops.get_db_converters(col) + field.get_db_converters(connection)))
        cache[model] = found
    return found


def from_row(model: type[M], row: Sequence[Any], start: int = 0) -> M:
    """An instance of ``model`` from ``row[start:start + width(model)]`` (``columns`` order)."""
    values = []
    for offset, (col, converters) in enumerate(_converters(model)):
        value = row[start + offset]
        for converter in converters:
            value = converter(value, col, connection)
        values.append(value)
    return model.from_db(connection.alias, None, values)  # type: ignore[arg-type]  # None: every field, in order


def json_value(value: Any) -> Any:
    """A JSON aggregate's value as Python: text on SQLite (and wherever the driver leaves it
    undecoded), already decoded elsewhere; None (no rows) becomes []."""
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str | bytes) else value


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


def json_array_agg(expression: str) -> str:
    """An aggregate collecting ``expression`` (a JSON array built by ``json_array``) into one
    JSON text: ``json_agg`` on PostgreSQL, ``json_group_array`` on SQLite."""
    return f"json_agg({expression})" if is_postgresql() else f"json_group_array({expression})"


def json_array(*expressions: str) -> str:
    """A JSON array of the expressions: ``json_build_array`` on PostgreSQL, ``json_array`` on
    SQLite."""
    function = "json_build_array" if is_postgresql() else "json_array"
    return f"{function}({', '.join(expressions)})"


def insert(model: type[Model], names: Sequence[str], objects: Sequence[Model]) -> tuple[str, list[Any]]:
    """``INSERT INTO table (names…) VALUES (…), (…)`` for ``objects`` and its parameters, each
    value prepared by its field exactly as a save would (datetimes, JSON)."""
    fields = [model._meta.get_field(name) for name in names]
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} "
        f"({', '.join(connection.ops.quote_name(_column(f)) for f in fields)}) "
        f"VALUES {', '.join([row] * len(objects))}"
    )
    params = [
        field.get_db_prep_save(getattr(obj, field.attname), connection)  # type: ignore[union-attr]
        for obj in objects
        for field in fields
    ]
    return sql, params


def converter(model: type[Model], names: Sequence[str]) -> Callable[[Sequence[Any]], list[Any]]:
    """A function giving raw values of ``model``'s columns ``names`` (attnames, such as ``item_id``)
    as the ORM would return them: the converters looked up once, columns that need none passed as
    they are."""
    by_name = {col.target.attname: (col, converters) for col, converters in _converters(model)}
    steps = [(i, *by_name[name]) for i, name in enumerate(names) if by_name[name][1]]

    def convert_row(values: Sequence[Any]) -> list[Any]:
        converted = list(values)
        for i, col, converters in steps:
            value = converted[i]
            for one in converters:
                value = one(value, col, connection)
            converted[i] = value
        return converted

    return convert_row


_STATEMENTS: dict[tuple[str, str], str] = {}


def statement(key: str, build: Callable[[], str]) -> str:
    """The SQL text ``build()`` makes, built once per database vendor and ``key``: the key
    press's statements are fixed strings, so formatting them again on every request is waste."""
    found = _STATEMENTS.get((connection.vendor, key))
    if found is None:
        found = _STATEMENTS[(connection.vendor, key)] = build()
    return found


# --- the key press's statements ----------------------------------------------------------------
# In the order a key press runs them; each built once per database (``statement``), the callers
# bind the named parameters.

# The study of a labeling URL, if the user annotates it, with its questions as one JSON array
# (one array per question, its columns in field order), sorted by the caller.
_LABELING_STUDY = """
SELECT {study}, (SELECT {questions} FROM {question_table} q WHERE q.study_id = s.id)
FROM {study_table} s
WHERE s.slug = %(slug)s
  AND EXISTS (SELECT 1 FROM {members} m WHERE m.{member_study} = s.id AND m.{member_user} = %(user)s)
"""


def labeling_study() -> str:
    """Parameters: slug, user. One row: the study's columns, then its questions as JSON."""

    def build() -> str:
        members = Study.annotators.through
        # SQLite keeps JSON columns as text: json() embeds them as JSON, not as a string.
        parts = [
            f"json(q.{f.column})"
            if f.get_internal_type() == "JSONField" and not is_postgresql()
            else f"q.{f.column}"
            for f in Question._meta.concrete_fields
        ]
        return _LABELING_STUDY.format(
            study=columns(Study, "s"),
            questions=json_array_agg(json_array(*parts)),
            question_table=Question._meta.db_table,
            study_table=Study._meta.db_table,
            members=members._meta.db_table,
            member_study=members._meta.get_field("study").column,
            member_user=members._meta.get_field("user").column,
        )

    return statement("labeling-study", build)


# The item lock of a label write (the row lock of FOR NO KEY UPDATE), returning the item and the
# membership check; counts the annotator's seat as completed in advance (key-press.md).
_LOCK_ITEM = """
UPDATE {item} SET completed_seats = completed_seats + 1
WHERE id = %(item)s{in_study}
RETURNING {columns},
  EXISTS (SELECT 1 FROM {members} m WHERE m.{member_study} = {item}.study_id AND m.{member_user} = %(user)s)
"""


def lock_item(*, in_study: bool) -> str:
    """Parameters: item, user (and study when ``in_study``). One row: the item's columns, then
    whether the user annotates its study; none when there is no such item (in the study)."""

    def build() -> str:
        members = Study.annotators.through
        return _LOCK_ITEM.format(
            item=Item._meta.db_table,
            in_study=" AND study_id = %(study)s" if in_study else "",
            columns=columns(Item, Item._meta.db_table),
            members=members._meta.db_table,
            member_study=members._meta.get_field("study").column,
            member_user=members._meta.get_field("user").column,
        )

    return statement(f"lock-item-{in_study}", build)


# Complete the annotator's open seat on the item, returning its labels (question, annotator, value)
# and final-label count, read under the item lock taken just before. No row: the seat is not open.
_SEAT_COMPLETE = """
UPDATE {assignment} SET completed_at = %(now)s
WHERE item_id = %(item)s AND annotator_id = %(user)s AND completed_at IS NULL
RETURNING id,
  (SELECT {labels} FROM {label} l WHERE l.item_id = %(item)s),
  (SELECT COUNT(*) FROM {final} f WHERE f.item_id = %(item)s)
"""


def seat_complete() -> str:
    """Parameters: now, item, user. One row (seat id, labels as JSON, final labels) or none."""

    def build() -> str:
        return _SEAT_COMPLETE.format(
            assignment=Assignment._meta.db_table,
            label=Label._meta.db_table,
            final=FinalLabel._meta.db_table,
            labels=json_array_agg(json_array("l.question_id", "l.annotator_id", "l.value")),
        )

    return statement("seat-complete", build)


def labels_insert(labels: Sequence[Label], fields: Sequence[str]) -> tuple[str, list[Any]]:
    """INSERT of new labels (their ``fields``) and its parameters. Rows: their ids, in the
    order of ``labels`` (Django's bulk_create relies on the same)."""
    sql, params = insert(Label, fields, labels)
    return sql + " RETURNING id", params


def labels_with_revisions(label_insert: str) -> str:
    """PostgreSQL: ``label_insert`` (an INSERT of labels, from ``insert``) and the first
    revision of each label, as one data-modifying WITH. Parameters: the insert's, then
    changed_by, changed_at, request_id. Rows: (question_id, label id)."""
    return (
        f"WITH l AS ({label_insert} RETURNING id, question_id, value, reason), "
        f"r AS (INSERT INTO {LabelRevision._meta.db_table} "
        "(label_id, value, reason, changed_by_id, changed_at, request_id) "
        "SELECT id, value, reason, %s, %s, %s FROM l) "
        "SELECT question_id, id FROM l"
    )


#: The columns the label writers insert (attnames), in the order of their value tuples.
LABEL_FIELDS = (
    "item_id",
    "question_id",
    "annotator_id",
    "value",
    "reason",
    "duration_ms",
    "request_id",
    "created_at",
    "updated_at",
)
LABEL_REVISION_FIELDS = ("label_id", "value", "reason", "changed_by_id", "changed_at", "request_id")
FINAL_FIELDS = ("item_id", "question_id", "value", "source", "decided_by_id", "note", "decided_at")
FINAL_COLUMNS = ", ".join(FINAL_FIELDS)


def final_with_revision(final_insert: str) -> str:
    """PostgreSQL: ``final_insert`` (an INSERT of one final label with the columns of
    ``FINAL_COLUMNS``, from ``insert``) and its first revision, as one data-modifying WITH."""
    table = FinalLabelRevision._meta.db_table
    return (
        f"WITH f AS ({final_insert} RETURNING {FINAL_COLUMNS}) "
        f"INSERT INTO {table} ({FINAL_COLUMNS}) SELECT {FINAL_COLUMNS} FROM f"
    )


SEAT_FIELDS = ("item", "annotator", "slot", "claimed_at", "expires_at")


def seats_claim(seats: Sequence[Assignment]) -> tuple[str, list[Any]]:
    """INSERT of open seats (their ``SEAT_FIELDS``) that skips a seat whose slot (or whose item,
    for its annotator) is taken, instead of failing; and its parameters. Rows: the item ids of
    the seats that went in."""
    sql, params = insert(Assignment, SEAT_FIELDS, seats)
    return sql + " ON CONFLICT DO NOTHING RETURNING item_id", params


# A final label set by a person (a researcher or an import) on the item ``{on}``: such an item is
# neither handed out nor counted as work left, unless it is a gold item (an attention check).
_DECIDED = (
    "SELECT 1 FROM {final} f WHERE f.item_id = {on} AND f.source IN (%(resolved)s, %(imported)s)"
    " AND NOT EXISTS (SELECT 1 FROM {gold} g WHERE g.item_id = f.item_id)"
)

# How many claimable items the progress counts at most ("1,000+ remaining" beyond it), so that
# the key press costs the same whatever the size of the study (a caller may count fewer).
PROGRESS_COUNT_CAP = 1000

# annotator_progress's counts: done (completed seats), open_seats (less items a person decided) and
# claimable (by _CANDIDATES' rule, up to the cap parameter). "+i.study_id": key-press.md.
_PROGRESS = """
SELECT
  (SELECT COUNT(*) FROM {assignment} a JOIN {item} i ON i.id = a.item_id
    WHERE a.annotator_id = %(user)s AND +i.study_id = %(study)s AND a.completed_at IS NOT NULL) AS done,
  (SELECT COUNT(*) FROM {assignment} a JOIN {item} i ON i.id = a.item_id
    WHERE a.annotator_id = %(user)s AND +i.study_id = %(study)s AND a.completed_at IS NULL
      AND NOT EXISTS ({decided})) AS open_seats,
  (SELECT COUNT(*) FROM (SELECT 1 FROM {item} i
    WHERE i.study_id = %(study)s AND i.queue > 0 AND i.completed_seats < %(n)s
      AND NOT EXISTS (SELECT 1 FROM {assignment} a
                       WHERE a.item_id = i.id AND +a.annotator_id = %(user)s{fence})
      AND NOT EXISTS ({decided}{fence})
      AND (SELECT COUNT(*) FROM {assignment} a
            WHERE a.item_id = i.id AND (a.completed_at IS NOT NULL OR a.expires_at > %(now)s)) < %(n)s
    LIMIT %(cap)s) c) AS claimable
"""


def _tables() -> dict[str, str]:
    return {
        "item": Item._meta.db_table,
        "assignment": Assignment._meta.db_table,
        "final": FinalLabel._meta.db_table,
        "gold": GoldAnswer._meta.db_table,
        "fence": _FENCE if is_postgresql() else "",
    }


# PostgreSQL: keeps each NOT EXISTS a per-row lookup instead of an anti join (key-press.md).
_FENCE = " OFFSET 0"


def progress() -> str:
    """Parameters: user, study, n, now, resolved, imported, cap. One row: done, open_seats,
    claimable (at most cap)."""

    def build() -> str:
        tables = _tables()
        return _PROGRESS.format(decided=_DECIDED.format(on="i.id", **tables), **tables)

    return statement("progress", build)


# The claim rule: items of one queue level (2 before 1) the annotator never held a seat on, with
# under N live (labelled or unexpired) seats and no final label fixed by a person; after a cursor.
_CANDIDATES = """
SELECT i.id FROM {item} i
WHERE i.study_id = %(study)s AND i.queue = %(queue)s AND i.completed_seats < %(n)s AND i.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM {assignment} a WHERE a.item_id = i.id AND +a.annotator_id = %(user)s{fence})
  AND NOT EXISTS (SELECT 1 FROM {final} f
                   WHERE f.item_id = i.id AND f.source IN (%(resolved)s, %(imported)s){fence})
  AND (SELECT COUNT(*) FROM {assignment} a
        WHERE a.item_id = i.id AND (a.completed_at IS NOT NULL OR a.expires_at > %(now)s)) < %(n)s
ORDER BY i.id
LIMIT {limit}{lock}
"""
_SKIP_LOCKED = " FOR NO KEY UPDATE OF i SKIP LOCKED"


def skips_locked_rows() -> bool:
    """Whether claims can skip the items other claimers hold (PostgreSQL; SQLite's writers take
    turns anyway)."""
    features = connection.features
    return bool(features.has_select_for_update_skip_locked and features.has_select_for_no_key_update)


def candidates(*, skip_locked: bool) -> str:
    """The claim rule on its own. Parameters: study, queue, n, after, user, resolved, imported,
    now, limit. Rows: item ids, ascending."""
    lock = skip_locked and skips_locked_rows()
    return statement(
        f"candidates-{lock}",
        lambda: _CANDIDATES.format(lock=_SKIP_LOCKED if lock else "", limit="%(limit)s", **_tables()),
    )


# The claim probe: _PROGRESS's counts, the first claimable items of one level (as many as the
# queue lacks, skipping held items on PostgreSQL) and those items' seats.
_QUEUE_PROBE = """
SELECT p.done, p.open_seats, p.claimable, c.id, s.slot, s.completed_at, s.expires_at
FROM ({progress}) p
LEFT JOIN (SELECT * FROM ({candidates}) c0 LIMIT %(size)s) c ON 1 = 1
LEFT JOIN {assignment} s ON s.item_id = c.id
ORDER BY c.id, s.slot
"""
# The outer "LIMIT %(size)s" changes no result but helps PostgreSQL's plan (key-press.md).
# How many seats the queue lacks: ``size`` less the open seats (as _OPEN_SEATS counts), at least
# 0. The probe's LIMIT, so that it locks no more items than it needs.
_SHORTFALL = """(SELECT CASE WHEN COUNT(*) < %(size)s THEN %(size)s - COUNT(*) ELSE 0 END
  FROM {assignment} a JOIN {item} i ON i.id = a.item_id
  WHERE a.annotator_id = %(user)s AND +i.study_id = %(study)s AND a.completed_at IS NULL
    AND NOT EXISTS ({decided}))"""


def queue_probe() -> str:
    """Parameters: those of ``progress`` and ``candidates`` (after 0) plus size. Rows: the three
    progress counts, then a candidate's id (None: no candidate) and one of its seats' slot,
    completed_at and expires_at (None: no seat), by id and slot."""

    def build() -> str:
        tables = _tables()
        limit = _SHORTFALL.format(decided=_DECIDED.format(on="a.item_id", **tables), **tables)
        claimable = _CANDIDATES.format(
            lock=_SKIP_LOCKED if skips_locked_rows() else "", limit=limit, **tables
        )
        return _QUEUE_PROBE.format(progress=progress(), candidates=claimable, **tables)

    return statement("queue-probe", build)


# The annotator's open seats in the order shown, each with its item, prompt and images with their
# files: one row per (seat, image).
_OPEN_SEATS = """
SELECT {seat}, {item}, {prompt}, {link}, {image}
FROM {assignment} a
JOIN {item_table} i ON i.id = a.item_id
LEFT JOIN {prompt_table} p ON p.id = i.prompt_id
LEFT JOIN {link_table} ii ON ii.item_id = i.id
LEFT JOIN {image_table} im ON im.id = ii.image_id
WHERE a.annotator_id = %(user)s AND +i.study_id = %(study)s AND a.completed_at IS NULL
  AND NOT EXISTS ({decided})
ORDER BY a.claimed_at, i.queue DESC, a.item_id, ii.role, ii.id
"""


def open_seats() -> str:
    """Parameters: user, study, resolved, imported. Rows: the columns of the seat, its item,
    the prompt, the item-image link and the image (the last three None when absent)."""

    def build() -> str:
        return _OPEN_SEATS.format(
            seat=columns(Assignment, "a"),
            item=columns(Item, "i"),
            prompt=columns(Prompt, "p"),
            link=columns(ItemImage, "ii"),
            image=columns(Image, "im"),
            assignment=Assignment._meta.db_table,
            item_table=Item._meta.db_table,
            prompt_table=Prompt._meta.db_table,
            link_table=ItemImage._meta.db_table,
            image_table=Image._meta.db_table,
            decided=_DECIDED.format(
                on="a.item_id", final=FinalLabel._meta.db_table, gold=GoldAnswer._meta.db_table
            ),
        )

    return statement("open-seats", build)


# --- the label import's statements -------------------------------------------------------------
# A chunk of items at a time: each takes ``studies.batching.is_in``'s clause, its parameters last.


def _quoted(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def import_items_by_path(where: str) -> str:
    """``where`` on ``l.source_path``. Parameters: study, role, then the paths. Rows:
    source_path, item id, key, question_keys (raw) of the study's links of that role."""
    return (
        f"SELECT l.source_path, i.id, i.{connection.ops.quote_name('key')}, i.question_keys "
        f"FROM {_quoted(ItemImage)} l INNER JOIN {_quoted(Item)} i ON i.id = l.item_id "
        f"WHERE i.study_id = %s AND l.role = %s AND {where}"
    )


def import_items_by_key(where: str) -> str:
    """``where`` on the quoted ``key``. Parameters: study, then the keys. Rows: id, key,
    question_keys (raw)."""
    key = connection.ops.quote_name("key")
    return f"SELECT id, {key}, question_keys FROM {_quoted(Item)} WHERE study_id = %s AND {where}"


def import_items(names: Sequence[str], where: str) -> str:
    """``where`` on ``id``. Parameters: the ids. Rows: the item fields ``names`` (attnames)."""
    fields = [Item._meta.get_field(name) for name in names]
    return (
        f"SELECT {', '.join(connection.ops.quote_name(_column(f)) for f in fields)} "
        f"FROM {_quoted(Item)} WHERE {where}"
    )


def import_items_lock(where: str) -> str:
    """``where`` on ``id``. Parameters: the ids. Locks the items in id order, as
    ``select_for_update(no_key=True)`` (one table: "OF" adds nothing); only on a database with
    row locks (not SQLite, whose writes are serial)."""
    features = connection.features
    lock = "FOR NO KEY UPDATE" if features.has_select_for_no_key_update else "FOR UPDATE"
    return f"SELECT id FROM {_quoted(Item)} WHERE {where} ORDER BY id {lock}"


def import_labels(where: str) -> str:
    """``where`` on ``item_id``. Parameters: the item ids. Rows: id, item_id, question_id,
    annotator_id, value, reason of the items' labels."""
    return f"SELECT id, item_id, question_id, annotator_id, value, reason FROM {_quoted(Label)} WHERE {where}"


def import_seats(where: str) -> str:
    """``where`` on ``item_id``. Parameters: the item ids. Rows: id, item_id, annotator_id,
    slot, completed_at, expires_at (raw: ``converter``) of the items' seats."""
    return (
        "SELECT id, item_id, annotator_id, slot, completed_at, expires_at "
        f"FROM {_quoted(Assignment)} WHERE {where}"
    )


def import_finals(where: str) -> str:
    """``where`` on ``item_id``. Parameters: the item ids. Rows: id, item_id, question_id,
    value, source, note, decided_by_id of the items' final labels."""
    return (
        "SELECT id, item_id, question_id, value, source, note, decided_by_id "
        f"FROM {_quoted(FinalLabel)} WHERE {where}"
    )


def import_agreed_finals(where: str) -> str:
    """``where`` on ``item_id``. Parameters: the source (agreed), then the item ids. Rows:
    item_id, question_id."""
    return f"SELECT item_id, question_id FROM {_quoted(FinalLabel)} WHERE source = %s AND {where}"


def completed_seats_set(where: str) -> str:
    """``where`` on ``id``. Parameters: the count, then the item ids. Sets these items'
    ``completed_seats`` (``claims.seat_complete``'s counter) to the count."""
    return f"UPDATE {_quoted(Item)} SET completed_seats = %s WHERE {where}"
