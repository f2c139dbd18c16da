"""What the database needs after a bulk write: fresh planner statistics.

A bulk import adds hundreds of thousands of rows at once. Until the database has statistics on
them, PostgreSQL plans as if each table held a handful of rows (the labeling key press's claim
statement measured ten times slower at 250,000 items before an ``ANALYZE``) and SQLite, without
``sqlite_stat1``, guesses at which index to use. Autovacuum catches up eventually on PostgreSQL,
SQLite never does: the bulk importers call ``database_analyze`` once at their end.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections

# SQLite: rows each index's statistics are drawn from (``PRAGMA analysis_limit``) — a sample, so
# the statistics of a million-row table take a fraction of a second instead of a full scan.
SQLITE_ANALYSIS_LIMIT = 2000


def database_analyze(*, using: str = DEFAULT_DB_ALIAS) -> None:
    """Refresh the planner statistics of every table (``ANALYZE``). Runs inside or outside a
    transaction; on SQLite it samples at most ``SQLITE_ANALYSIS_LIMIT`` rows per index."""
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_LIMIT}")
        cursor.execute("ANALYZE")
