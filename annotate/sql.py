"""Model instances from raw SQL rows, for the labeling key press.

The key press runs a handful of fixed SQL statements (``annotate.services``,
``annotate.selectors``) instead of ORM querysets: building and compiling a queryset costs
0.5-2 ms of CPU, more than the database needs to run it. The rows still come back as real model
instances — with the same conversions the ORM applies (SQLite's datetimes and JSON text, the
JSON fields' decoding) — so every caller and template sees what it always saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

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


def placeholders(names: Sequence[str]) -> str:
    """``%(a)s, %(b)s …`` for a VALUES list."""
    return ", ".join(f"%({name})s" for name in names)


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


def convert(model: type[Model], names: Sequence[str], values: Sequence[Any]) -> list[Any]:
    """Raw column values of ``model``'s fields ``names`` as the ORM would return them."""
    by_name = {col.target.name: (col, converters) for col, converters in _converters(model)}
    converted = []
    for name, value in zip(names, values, strict=True):
        col, converters = by_name[name]
        for converter in converters:
            value = converter(value, col, connection)
        converted.append(value)
    return converted


_STATEMENTS: dict[tuple[str, str], str] = {}


def statement(key: str, build: Callable[[], str]) -> str:
    """The SQL text ``build()`` makes, built once per database vendor and ``key``: the key
    press's statements are fixed strings, so formatting them again on every request is waste."""
    found = _STATEMENTS.get((connection.vendor, key))
    if found is None:
        found = _STATEMENTS[(connection.vendor, key)] = build()
    return found
