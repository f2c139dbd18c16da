"""Bounded batches for the imports: how many CSV rows are held at once, and how many values one
SQL statement may carry.

A file of a million rows is read, checked and written a batch at a time, so memory stays flat
whatever the file's size; and no statement may carry more bound values than the database
allows (SQLite's ``SQLITE_MAX_VARIABLE_NUMBER``: 32,766 since 3.32, 999 before; PostgreSQL
65,535), however many rows a file has — Django itself does not split an ``__in`` list.

Both sizes come from settings so a test can make them tiny (and prove the splitting at 50 rows
instead of 50,000):

- ``BIASLAB_IMPORT_BATCH_ROWS`` (default 2,000): CSV rows checked, and written, per batch;
- ``BIASLAB_SQL_MAX_VARIABLES`` (default 999, safe on every SQLite build): bound values per
  statement; an ``__in`` list gets this many values at most, a ``bulk_create`` this many
  values per INSERT (values per row times rows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import islice
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import DateTimeField, JSONField, Model, Prefetch, prefetch_related_objects
from django.db.models.lookups import In

T = TypeVar("T")

DEFAULT_IMPORT_BATCH_ROWS = 2_000
DEFAULT_SQL_MAX_VARIABLES = 999
# Values a statement needs besides an ``__in`` list (study id, role, detector, version …).
_OTHER_VARIABLES = 10


def import_batch_rows() -> int:
    """CSV rows per batch of an import (``settings.BIASLAB_IMPORT_BATCH_ROWS``)."""
    return max(1, int(getattr(settings, "BIASLAB_IMPORT_BATCH_ROWS", DEFAULT_IMPORT_BATCH_ROWS)))


def sql_max_variables() -> int:
    """Bound values one statement may carry (``settings.BIASLAB_SQL_MAX_VARIABLES``)."""
    return max(
        _OTHER_VARIABLES + 1,
        int(getattr(settings, "BIASLAB_SQL_MAX_VARIABLES", DEFAULT_SQL_MAX_VARIABLES)),
    )


def in_chunk_size() -> int:
    """How many values one ``__in`` list may hold, leaving room for the statement's others."""
    return sql_max_variables() - _OTHER_VARIABLES


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter), read lazily: a generator of a
    million rows is never held at once."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def prefetch_in_chunks(objs: Sequence[Model], *lookups: str | Prefetch[Any]) -> None:
    """``prefetch_related_objects`` a chunk of ``objs`` at a time: Django's prefetch names every
    object in one ``IN`` list per lookup, for any number of them."""
    for chunk in batches(objs, in_chunk_size()):
        prefetch_related_objects(chunk, *lookups)


def in_chunks(values: Iterable[T]) -> Iterator[list[T]]:
    """``values`` (deduplicated, first occurrence first) in lists short enough for one ``__in``."""
    return batches(list(dict.fromkeys(values)), in_chunk_size())


def is_in(column: str, values: Sequence[Any], *, array: str = "bigint") -> tuple[str, list[Any]]:
    """``column IN (%s, …)`` and its parameters, one per value — on PostgreSQL ``column =
    ANY(%s::<array>[])`` with the values as one array parameter: psycopg parses a statement's
    text for its placeholders on every execution, and a thousand placeholders cost more than
    the query. The same rows either way (the values are never NULL); the caller splits the
    values with ``in_chunks`` so the SQLite form stays under the variable limit. ``array``: the
    array's type on PostgreSQL (``bigint`` for ids, ``text`` for keys)."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s::{array}[])", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


class IsIn(In):
    """``is_in`` for a queryset: ``filter(IsIn(F("item_id"), ids))`` — ``item_id IN (%s, …)``,
    on PostgreSQL ``item_id = ANY(%s::bigint[])`` with the values as one array parameter (the
    column's own type), for the same reason: through ``__in``, Django's compiling and
    psycopg's parsing of a thousand placeholders cost about 4 ms a chunk, as much as the index
    look-ups it asks for (a million-image report's 11 chunks of item images: 94 ms, 47 ms
    through this). The caller splits the values with ``in_chunks``, as for ``__in``."""

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        array = self.lhs.output_field.db_type(connection)
        return f"{lhs} = ANY(%s::{array}[])", [*lhs_params, list(self.rhs)]


def bulk_batch_size(model: type[Model]) -> int:
    """Rows per INSERT of ``bulk_create`` on ``model`` so one statement stays under the variable
    limit (Django's own SQLite batching assumes 999, which a smaller limit would break)."""
    columns = sum(1 for field in model._meta.concrete_fields if not field.primary_key) or 1
    return max(1, sql_max_variables() // columns)


#: Rows per statement of the PostgreSQL inserts that send their rows as one JSON array.
JSON_ROWS_PER_STATEMENT = 2_000


def rows_insert(
    model: type[Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    returning: bool = False,
    ignore_conflicts: bool = False,
) -> list[int]:
    """INSERT ``rows`` (tuples of values for the fields ``names``: attnames such as ``item_id``)
    with multi-row statements, each under the variable limit — on PostgreSQL with one ``COPY``
    (``_rows_copy``; with ``returning``, the ids taken from the table's sequence first); with
    ``returning``, the new ids in the order of ``rows`` (which Django's bulk_create relies on
    too). With
    ``ignore_conflicts``, a row that breaks a unique constraint is skipped (``ON CONFLICT DO
    NOTHING``, SQLite and PostgreSQL; not with ``returning``: the ids would not match ``rows``;
    ``rows_insert_returning`` says which rows went in; on PostgreSQL these two go in as
    ``INSERT … SELECT … FROM json_array_elements(%s)``, the rows as one JSON array).

    For the bulk imports: ``bulk_create`` builds a model instance per row and prepares every
    value through its field, which costs more than the database spends storing the row. Here
    only the values that need it are prepared — JSON (once per distinct empty value: most
    rows' params and metadata are ``{}``), and datetimes (once per distinct value: an import
    stamps a batch with one time) — and the others go to the driver as they are."""
    if returning and ignore_conflicts:
        raise ValueError("rows_insert: returning and ignore_conflicts exclude each other")
    returned = _rows_insert(
        model, names, rows, returning=("id",) if returning else (), ignore_conflicts=ignore_conflicts
    )
    return [pk for (pk,) in returned]


def rows_insert_returning(
    model: type[Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    returning: Sequence[str],
    ignore_conflicts: bool = False,
) -> list[tuple[Any, ...]]:
    """``rows_insert`` that gives back the ``returning`` columns of every row it inserted, in no
    particular order (a row skipped as a conflict gives nothing): the caller maps them by a
    column it knows (a hash, a key) instead of asking the database for the new ids again."""
    return _rows_insert(model, names, rows, returning=returning, ignore_conflicts=ignore_conflicts)


def _rows_insert(
    model: type[Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    returning: Sequence[str],
    ignore_conflicts: bool,
) -> list[tuple[Any, ...]]:
    fields: list[Any] = [model._meta.get_field(name) for name in names]
    prepare = [isinstance(f, (JSONField, DateTimeField)) for f in fields]
    # The connection itself, looked up once: ``connection`` is a proxy that finds the
    # thread's connection on every use (a fifth of preparing a million JSON values).
    db = connections[DEFAULT_DB_ALIAS]
    copy = db.vendor == "postgresql" and not ignore_conflicts and tuple(returning) in ((), ("id",))
    # PostgreSQL without COPY: the rows go in as one JSON array, read by the statement itself.
    elements = None if copy else _json_elements(fields, db)
    quote = db.ops.quote_name
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    head = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) VALUES "
    times: dict[datetime, Any] = {}
    empties: dict[tuple[str, type], Any] = {}
    # JSON text by the value's identity: rows often share one output object (an import's
    # verdicts repeat), and ``rows`` keeps every value alive, so an id is not reused here.
    texts: dict[int, str] = {}

    def prepared(field: Any, value: Any) -> Any:
        if (copy or elements) and isinstance(field, JSONField) and value is not None:
            # COPY reads a jsonb column's text: the JSON itself, without the driver's wrapper
            # (and the JSON array of rows carries it as a string the statement casts).
            text = texts.get(id(value))
            if text is None:
                text = texts[id(value)] = json.dumps(value, cls=field.encoder)
            return text
        if isinstance(value, datetime):
            if value not in times:
                times[value] = field.get_db_prep_save(value, db)
            return times[value]
        if not value and isinstance(value, (dict, list)):
            key = (field.name, type(value))
            if key not in empties:
                empties[key] = field.get_db_prep_save(value, db)
            return empties[key]
        return field.get_db_prep_save(value, db)

    width = len(fields)
    # The columns whose values go through ``prepared``; the others are passed as they are.
    to_prepare = [(i, field) for i, (field, needs) in enumerate(zip(fields, prepare, strict=True)) if needs]

    def ready(row: Sequence[Any]) -> Sequence[Any]:
        if len(row) != width:
            raise ValueError(f"rows_insert: a row of {len(row)} values for {width} columns")
        if not to_prepare:
            return row
        row = list(row)
        for i, field in to_prepare:
            row[i] = prepared(field, row[i])
        return row

    if copy:
        return _rows_copy(model, fields, [ready(row) for row in rows], with_ids=bool(returning))
    tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
    if returning:
        returned: list[Any] = [model._meta.get_field(name) for name in returning]
        tail += " RETURNING " + ", ".join(quote(f.column) for f in returned)
    out: list[tuple[Any, ...]] = []
    per_statement = max(1, sql_max_variables() // width)
    if elements:
        # One value whatever the rows, and the same statement text for every chunk. (Arrays,
        # one per column as Django's bulk_create sends them, went through psycopg's Python
        # array dumper, which escaped every element with a regular expression: most of an
        # image import's time in the driver.) So chunks are bounded by their size, not by the
        # variable limit, which would cost a statement (its parse and plan) per hundred rows.
        per_statement = JSON_ROWS_PER_STATEMENT
        head = (
            head.removesuffix(" VALUES ") + f" SELECT {', '.join(elements)} FROM json_array_elements(%s) AS r"
        )
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params: list[Any] = []
            for row in map(ready, chunk):
                if elements:
                    params.append(row)
                else:
                    params += row
            if elements:
                # The array keeps the rows' order: RETURNING gives the new ids in that order.
                # default=str: the datetimes (ISO text, which PostgreSQL reads back as such).
                cursor.execute(head + tail, [json.dumps(params, default=str)])
            else:
                cursor.execute(head + ", ".join([one] * len(chunk)) + tail, params)
            if returning:
                out += [tuple(row) for row in cursor.fetchall()]
    return out


def _rows_copy(
    model: type[Model], fields: Sequence[Any], rows: list[Sequence[Any]], *, with_ids: bool
) -> list[tuple[Any, ...]]:
    """PostgreSQL: the rows in one ``COPY … FROM STDIN`` (no statement text at all: psycopg
    formats each row in C, where the INSERT's arrays went through a Python dumper that escaped
    every element with a regular expression — a third of a million-prediction import). With
    ``with_ids`` the new ids are taken from the table's sequence first, one query for all the
    rows, and written with them: → ``[(id,), …]`` in the order of ``rows``, as the INSERT's
    RETURNING gave them. COPY knows no ON CONFLICT: a row breaking a constraint fails the whole
    call, as a multi-row INSERT would."""
    if not rows:
        return []
    quote = connection.ops.quote_name
    table = model._meta.db_table
    columns = [quote(f.column) for f in fields]
    ids: list[int] = []
    with connection.cursor() as cursor:
        if with_ids:
            pk = model._meta.pk
            assert pk is not None
            assert pk.column
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [table, pk.column, len(rows)],
            )
            # Sorted: a sequence hands out rising values, the rows keep their order in the ids.
            ids = sorted(pk_value for (pk_value,) in cursor.fetchall())
            columns.insert(0, quote(pk.column))
        statement = f"COPY {quote(table)} ({', '.join(columns)}) FROM STDIN"
        # The driver's own cursor (Django's wrapper has no ``copy``), its errors turned into
        # Django's as ``execute`` would (a caller catches IntegrityError).
        with connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
            if with_ids:
                for pk_value, row in zip(ids, rows, strict=True):
                    copy.write_row((pk_value, *row))
            else:
                for row in rows:
                    copy.write_row(row)
    return [(pk_value,) for pk_value in ids]


def _json_elements(fields: Sequence[Any], db: Any) -> list[str] | None:
    """On PostgreSQL, for each field the expression that reads its value from ``r``, one row of
    the JSON array of rows (``json_array_elements``): ``(r->>i)::<type>``. None elsewhere, or
    when a field's values cannot be read that way (a value-dependent placeholder, a type
    Django does not know) — the conditions Django's own compiler checks before it inserts
    from arrays (``django.db.backends.postgresql.compiler``).

    With psycopg's client-side binding (Django's default), every placeholder of a statement's
    text is parsed on every execution: a thousand of them per multi-row INSERT cost more than
    PostgreSQL spends storing the rows."""
    if db.vendor != "postgresql":
        return None
    elements = []
    for i, field in enumerate(fields):
        target = field.target_field if field.is_relation else field
        db_type = field.db_type(db)
        if (
            hasattr(field, "get_placeholder")
            or target.get_internal_type() not in db.data_types
            or not db_type
        ):
            return None
        # Without its parameters (varchar, not varchar(50)): nothing is cut on the way in. A
        # JSON column's value is its JSON text (``prepared``), cast as the column's type.
        elements.append(f"(r->>{i})::{db_type.split('(')[0]}")
    return elements
