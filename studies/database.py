"""What the database needs after a bulk write: fresh planner statistics.

A bulk import adds hundreds of thousands of rows at once. Until the database has statistics on
them, PostgreSQL plans as if each table held a handful of rows (the labeling key press's claim
statement measured ten times slower at 250,000 items before an ``ANALYZE``) and SQLite, without
``sqlite_stat1``, guesses at which index to use. Autovacuum catches up eventually on PostgreSQL,
SQLite never does: the bulk importers call ``database_analyze`` once at their end.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

# SQLite: ``ANALYZE`` reads every index whole (``PRAGMA analysis_limit = 0``). A sample (it was
# 2,000 rows an index) misleads the planner on a column with few values: the study index of a
# million items of one study read as "2,001 items a study", so a lookup of 989 keys scanned the
# whole study through it (130 ms a chunk: 163 s of a re-import of a million rows). The whole
# database of a million images is analysed in 0.4 s here.
SQLITE_ANALYSIS_LIMIT = 0


def database_analyze(*, models: Sequence[type[Model]] = (), using: str = DEFAULT_DB_ALIAS) -> None:
    """Refresh the planner statistics (``ANALYZE``) of the tables of ``models``, or of every
    table when none is given. Runs inside or outside a transaction; on SQLite it reads every
    row of every index (``SQLITE_ANALYSIS_LIMIT``). An import that wrote a few tables names them:
    a label import into a million-image study need not read the million items and predictions
    again (most of its time, at 40,000 labels)."""
    connection = connections[using]
    tables = [connection.ops.quote_name(model._meta.db_table) for model in models]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_LIMIT}")
        if not tables:
            cursor.execute("ANALYZE")
        elif connection.vendor == "sqlite":  # one table a statement
            for table in tables:
                cursor.execute(f"ANALYZE {table}")
        else:
            cursor.execute(f"ANALYZE {', '.join(tables)}")
