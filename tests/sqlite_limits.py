"""SQLite's limit of bound values per statement, lowered for a test: the streaming importers and
exports must keep every statement under the database's limit at any size."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

LIMIT = 60  # bound values per statement, for the tests


@contextmanager
def sqlite_variable_limit(limit: int) -> Iterator[None]:
    """Lower SQLite's own limit of bound values per statement for the block (skips elsewhere)."""
    if connection.vendor != "sqlite":
        pytest.skip("the variable limit is pinned on SQLite")
    connection.ensure_connection()
    raw = connection.connection
    old = raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    try:
        yield
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, old)
