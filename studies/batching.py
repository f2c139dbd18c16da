"""Bounded batches: CSV rows held at once (``BIASLAB_IMPORT_BATCH_ROWS``) and values per SQL
statement (``BIASLAB_SQL_MAX_VARIABLES``), plus fast multi-row inserts. See
docs/explanation/imports.md."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
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
        _OTHER_VARIABLES + 1, int(getattr(settings, "BIASLAB_SQL_MAX_VARIABLES", DEFAULT_SQL_MAX_VARIABLES))
    )


def in_chunk_size() -> int:
    """How many values one ``__in`` list may hold, leaving room for the statement's others."""
    return sql_max_variables() - _OTHER_VARIABLES


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size``, read lazily."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def prefetch_in_chunks(objs: Sequence[Model], *lookups: str | Prefetch[Any]) -> None:
    """``prefetch_related_objects`` a chunk of ``objs`` at a time (one ``IN`` list each)."""
    for chunk in batches(objs, in_chunk_size()):
        prefetch_related_objects(chunk, *lookups)


def in_chunks(values: Iterable[T]) -> Iterator[list[T]]:
    """``values`` (deduplicated, first occurrence first) in lists short enough for one ``__in``."""
    return batches(list(dict.fromkeys(values)), in_chunk_size())


def in_rows(rows: Any, lookup: str, values: Iterable[Any], *fields: str) -> Iterator[Any]:
    """``rows.filter(<lookup>__in=values)`` a chunk of ``values`` at a time: the objects, or with
    ``fields`` their ``values_list`` (flat for one field)."""
    for chunk in in_chunks(values):
        found = rows.filter(**{f"{lookup}__in": chunk})
        yield from found.values_list(*fields, flat=len(fields) == 1) if fields else found


def chunk_rows(
    statement: Callable[[str], str], values: Iterable[Any], column: str, *first: Any, array: str = "bigint"
) -> Iterator[tuple[Any, ...]]:
    """The rows of the raw SQL ``statement(where)`` whose ``column`` is in ``values``, a chunk of
    values per query (parameters: ``first``, then the chunk's); ``in_rows`` for querysets."""
    with connection.cursor() as cursor:
        for chunk in in_chunks(values):
            where, params = is_in(column, chunk, array=array)
            cursor.execute(statement(where), [*first, *params])
            yield from cursor.fetchall()


def is_in(column: str, values: Sequence[Any], *, array: str = "bigint") -> tuple[str, list[Any]]:
    """``column IN (%s, …)`` and its parameters; on PostgreSQL ``column = ANY(%s::<array>[])``
    with one array parameter (cheaper to parse). Split the values with ``in_chunks``."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s::{array}[])", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


class IsIn(In):
    """``is_in`` for a queryset: ``filter(IsIn(F("item_id"), ids))``; split the values with
    ``in_chunks``."""

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        array = self.lhs.output_field.db_type(connection)
        return f"{lhs} = ANY(%s::{array}[])", [*lhs_params, list(self.rhs)]


def bulk_batch_size(model: type[Model]) -> int:
    """Rows per INSERT of ``bulk_create`` on ``model`` under the variable limit."""
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
    """INSERT ``rows`` (value tuples for the attnames ``names``) in multi-row statements under the
    variable limit (PostgreSQL: ``COPY``), preparing only JSON and datetime values; with
    ``returning``, the new ids in the order of ``rows``; ``ignore_conflicts`` skips duplicates."""
    if returning and ignore_conflicts:
        raise ValueError("rows_insert: returning and ignore_conflicts exclude each other")
    returned = rows_insert_returning(
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
    """``rows_insert`` giving back the ``returning`` columns of the rows it inserted, in no order."""
    fields: list[Any] = [model._meta.get_field(name) for name in names]
    prepare = [isinstance(f, (JSONField, DateTimeField)) for f in fields]
    # The connection itself, looked up once: ``connection`` is a proxy that finds it on every use.
    db = connections[DEFAULT_DB_ALIAS]
    copy = db.vendor == "postgresql" and not ignore_conflicts and tuple(returning) in ((), ("id",))
    elements = None if copy else _json_elements(fields, db)
    quote = db.ops.quote_name
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    head = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) VALUES "
    times: dict[datetime, Any] = {}
    empties: dict[tuple[str, type], Any] = {}
    # JSON text by the value's identity: rows often share one object, kept alive by ``rows``.
    texts: dict[int, str] = {}

    def prepared(field: Any, value: Any) -> Any:
        if (copy or elements) and isinstance(field, JSONField) and value is not None:
            # COPY reads a jsonb column's text: the JSON itself, without the driver's wrapper.
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
        # One value whatever the rows, one statement text for every chunk (see docs/explanation/imports.md).
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
                cursor.execute(head + tail, [json.dumps(params, default=str)])
            else:
                cursor.execute(head + ", ".join([one] * len(chunk)) + tail, params)
            if returning:
                out += [tuple(row) for row in cursor.fetchall()]
    return out


def _rows_copy(
    model: type[Model], fields: Sequence[Any], rows: list[Sequence[Any]], *, with_ids: bool
) -> list[tuple[Any, ...]]:
    """PostgreSQL: the rows in one ``COPY … FROM STDIN``; ``with_ids`` takes the ids from the
    table's sequence first and returns them in the order of ``rows``."""
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
        # The driver's own cursor (Django's has no ``copy``), its errors turned into Django's.
        with connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
            if with_ids:
                for pk_value, row in zip(ids, rows, strict=True):
                    copy.write_row((pk_value, *row))
            else:
                for row in rows:
                    copy.write_row(row)
    return [(pk_value,) for pk_value in ids]


def _json_elements(fields: Sequence[Any], db: Any) -> list[str] | None:
    """PostgreSQL: per field the expression ``(r->>i)::<type>`` reading it from one element of a
    JSON array of rows; None elsewhere or when a field cannot be read so."""
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
        # Without its parameters (varchar, not varchar(50)): nothing is cut on the way in.
        elements.append(f"(r->>{i})::{db_type.split('(')[0]}")
    return elements
