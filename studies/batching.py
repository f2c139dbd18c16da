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

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import islice
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection
from django.db.models import DateTimeField, JSONField, Model

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


def in_chunks(values: Iterable[T]) -> Iterator[list[T]]:
    """``values`` (deduplicated, first occurrence first) in lists short enough for one ``__in``."""
    return batches(list(dict.fromkeys(values)), in_chunk_size())


def bulk_batch_size(model: type[Model]) -> int:
    """Rows per INSERT of ``bulk_create`` on ``model`` so one statement stays under the variable
    limit (Django's own SQLite batching assumes 999, which a smaller limit would break)."""
    columns = sum(1 for field in model._meta.concrete_fields if not field.primary_key) or 1
    return max(1, sql_max_variables() // columns)


def rows_insert(
    model: type[Model],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    returning: bool = False,
    ignore_conflicts: bool = False,
) -> list[int]:
    """INSERT ``rows`` (tuples of values for the fields ``names``: attnames such as ``item_id``)
    with multi-row statements, each under the variable limit (on PostgreSQL one array per
    column, ``INSERT … SELECT * FROM UNNEST``, as Django's bulk_create); with ``returning``, the new ids
    in the order of ``rows`` (which Django's bulk_create relies on too). With
    ``ignore_conflicts``, a row that breaks a unique constraint is skipped (``ON CONFLICT DO
    NOTHING``, SQLite and PostgreSQL; not with ``returning``: the ids would not match ``rows``;
    ``rows_insert_returning`` says which rows went in).

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
    quote = connection.ops.quote_name
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    head = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) VALUES "
    times: dict[datetime, Any] = {}
    empties: dict[tuple[str, type], Any] = {}

    def prepared(field: Any, value: Any) -> Any:
        if isinstance(value, datetime):
            if value not in times:
                times[value] = field.get_db_prep_save(value, connection)
            return times[value]
        if not value and isinstance(value, (dict, list)):
            key = (field.name, type(value))
            if key not in empties:
                empties[key] = field.get_db_prep_save(value, connection)
            return empties[key]
        return field.get_db_prep_save(value, connection)

    tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
    if returning:
        returned: list[Any] = [model._meta.get_field(name) for name in returning]
        tail += " RETURNING " + ", ".join(quote(f.column) for f in returned)
    out: list[tuple[Any, ...]] = []
    width = len(fields)
    # The columns whose values go through ``prepared``; the others are passed as they are.
    to_prepare = [(i, field) for i, (field, needs) in enumerate(zip(fields, prepare, strict=True)) if needs]
    per_statement = max(1, sql_max_variables() // width)
    arrays = _unnest_types(fields)
    if arrays:
        # One array per column (Django's own bulk_create on PostgreSQL): the statement carries
        # ``width`` values whatever its rows, and its text is the same for every chunk.
        head = head.removesuffix(" VALUES ") + f" SELECT * FROM UNNEST({', '.join(arrays)})"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params: list[Any] = []
            for row in chunk:
                if len(row) != width:
                    raise ValueError(f"rows_insert: a row of {len(row)} values for {width} columns")
                if to_prepare:
                    row = list(row)
                    for i, field in to_prepare:
                        row[i] = prepared(field, row[i])
                if arrays:
                    params.append(row)
                else:
                    params += row
            if arrays:
                # The arrays keep the rows' order: RETURNING gives the new ids in that order.
                cursor.execute(head + tail, [list(column) for column in zip(*params, strict=True)])
            else:
                cursor.execute(head + ", ".join([one] * len(chunk)) + tail, params)
            if returning:
                out += [tuple(row) for row in cursor.fetchall()]
    return out


def _unnest_types(fields: Sequence[Any]) -> list[str] | None:
    """On PostgreSQL, ``(%s)::<type>[]`` for each field's array in ``INSERT … SELECT * FROM
    UNNEST(…)`` — under the conditions Django's own compiler checks before it inserts that way
    (``django.db.backends.postgresql.compiler``); None elsewhere, or when a field's values
    cannot go in an array (a value-dependent placeholder, a type Django does not know).

    With psycopg's client-side binding (Django's default), every placeholder of a statement's
    text is parsed on every execution: a thousand of them per multi-row INSERT cost more than
    PostgreSQL spends storing the rows."""
    if connection.vendor != "postgresql":
        return None
    arrays = []
    for field in fields:
        target = field.target_field if field.is_relation else field
        db_type = field.db_type(connection)
        if (
            hasattr(field, "get_placeholder")
            or target.get_internal_type() not in connection.data_types
            or not db_type
        ):
            return None
        # Without its parameters (varchar, not varchar(50)): nothing is cut on the way in.
        arrays.append(f"(%s)::{db_type.split('(')[0]}[]")
    return arrays
