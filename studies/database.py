"""What the database needs after a bulk write: fresh planner statistics, visible rows, and on
SQLite a bigger page cache. Why: docs/how-to/deploy.md."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import connection
from django.db.models import Model

# SQLite: ``ANALYZE`` reads every index whole; a sample misjudged the study index (docs/how-to/deploy.md).
SQLITE_ANALYSIS_LIMIT = 0


def database_analyze(*, models: Sequence[type[Model]] = (), vacuum: bool = False) -> None:
    """``ANALYZE`` the tables of ``models`` (every table when none); ``vacuum``: on PostgreSQL
    outside a transaction ``VACUUM (ANALYZE)``, which also marks the new rows visible."""
    tables = [connection.ops.quote_name(model._meta.db_table) for model in models]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_LIMIT}")
            for statement in [f"ANALYZE {table}" for table in tables] or ["ANALYZE"]:  # one table a statement
                cursor.execute(statement)
            return
        command = "VACUUM (ANALYZE)" if vacuum and _can_vacuum() else "ANALYZE"
        cursor.execute(f"{command} {', '.join(tables)}".rstrip())


def _can_vacuum() -> bool:
    """PostgreSQL outside a transaction: the only place ``VACUUM`` runs."""
    return connection.vendor == "postgresql" and not connection.in_atomic_block


def rows_mark_visible(*, models: Sequence[type[Model]]) -> None:
    """On PostgreSQL outside a transaction, ``VACUUM`` the tables of ``models``; else nothing."""
    if models and _can_vacuum():
        with connection.cursor() as cursor:
            cursor.execute("VACUUM " + ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models))


# SQLite's page cache (KiB) for a bulk write's connection: index pages are read again on every statement.
SQLITE_BULK_CACHE_KIB = 65_536


@contextmanager
def bulk_page_cache() -> Iterator[None]:
    """On SQLite, the page cache at ``SQLITE_BULK_CACHE_KIB`` for the block."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        (before,) = cursor.fetchone()
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_BULK_CACHE_KIB}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = {int(before)}")
