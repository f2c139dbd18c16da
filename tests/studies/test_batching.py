"""``studies.batching.rows_insert``: the rows go in as given, split under the variable limit, and
the new ids come back in the order of the rows — also on PostgreSQL, where the rows travel as
COPY text (ids from the sequence), or as one JSON array of rows (``INSERT … SELECT … FROM
json_array_elements``) when conflicts are skipped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from studies.batching import rows_insert, rows_insert_returning
from studies.imports.manifest_store import ITEM_COLUMNS
from studies.models import Item
from tests.sqlite_limits import LIMIT

pytestmark = pytest.mark.django_db

# The columns the image import writes a new item with.
_COLUMNS = ITEM_COLUMNS


def _rows(study, n):
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    # Keys out of order, some values null, JSON empty and not: nothing may depend on the order
    # the database would sort them in, nor on every row looking alike.
    return [
        (
            study.pk,
            f"k/{(i * 37) % n:04d}.png",
            None,
            "sdxl" if i % 2 else "",
            None if i % 3 else i,
            i,
            {} if i % 4 else {"steps": i},
            {"gender": "male", "boxes": [[i, 0, 1, 1]]} if i % 5 == 0 else {},
            ["gender"] if i % 7 == 0 else [],
            i % 3,
            0,
            at,
        )
        for i in range(n)
    ]


def test_rows_insert_writes_every_row_and_returns_the_new_ids_in_the_order_of_the_rows(settings, study):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT  # a few rows per statement: many statements
    rows = _rows(study, 53)
    ids = rows_insert(Item, _COLUMNS, rows, returning=True)
    assert len(ids) == len(set(ids)) == 53
    stored = {item.pk: item for item in Item.objects.filter(pk__in=ids)}
    for pk, row in zip(ids, rows, strict=True):
        item = stored[pk]
        assert (item.key, item.t2i_model, item.seed, item.index, item.queue) == (
            row[1],
            row[3],
            row[4],
            row[5],
            row[9],
        )
        assert (item.params, item.metadata, item.question_keys, item.created_at) == (
            row[6],
            row[7],
            row[8],
            row[11],
        )


def test_rows_insert_returning_skips_conflicting_rows_and_names_the_ones_written(settings, study):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    rows = _rows(study, 30)
    rows_insert(Item, _COLUMNS, rows[:10])
    returned = rows_insert_returning(Item, _COLUMNS, rows, returning=("key", "id"), ignore_conflicts=True)
    assert sorted(key for key, _ in returned) == sorted(row[1] for row in rows[10:])
    assert dict(returned) == dict(
        Item.objects.filter(key__in=[r[1] for r in rows[10:]]).values_list("key", "id")
    )
    assert Item.objects.filter(study=study).count() == 30


def test_rows_skipping_conflicts_go_in_statements_of_the_json_size_on_postgresql_else_of_the_variable_limit(
    settings, study, monkeypatch, django_assert_num_queries
):
    """PostgreSQL's JSON rows carry one bound value a statement, whatever their number: they
    are split by ``JSON_ROWS_PER_STATEMENT``; other inserts stay under the variable limit."""
    from django.db import connection

    import studies.batching

    settings.BIASLAB_SQL_MAX_VARIABLES = 3 * len(_COLUMNS)  # three rows of plain values
    monkeypatch.setattr(studies.batching, "JSON_ROWS_PER_STATEMENT", 10)
    rows = _rows(study, 25)
    # 10 + 10 + 5 rows, or 8 statements of 3 rows and one of 1.
    statements = 3 if connection.vendor == "postgresql" else 9
    with django_assert_num_queries(statements):
        returned = rows_insert_returning(Item, _COLUMNS, rows, returning=("key", "id"), ignore_conflicts=True)
    assert len(returned) == 25


def test_a_row_of_the_wrong_width_is_refused(study):
    with pytest.raises(ValueError, match="a row of 2 values for 12 columns"):
        rows_insert(Item, _COLUMNS, [(study.pk, "k/1.png")])


@pytest.mark.parametrize("skipping_conflicts", [False, True])
def test_text_the_copy_format_or_json_would_misread_goes_in_as_it_is(study, skipping_conflicts):
    # On PostgreSQL the rows travel as COPY text, where a tab, a newline, a backslash and
    # ``\N`` mean something, or (conflicts skipped) as a JSON array of rows, where quotes,
    # backslashes and a JSON column's own text do: each value must come back as it was given.
    awkward = [
        "tab\there",
        "new\nline",
        "back\\slash",
        "\\N",
        "",
        "quote\"'",
        "é ✓ 漢字",
        "cr\rlf",
        '{"a": 1}',
    ]
    at = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    rows = [
        (
            study.pk,
            f"k/{i}",
            None,
            text,
            None if i % 2 else 10**12 + i,
            i,
            {"text": text},
            {},
            [text],
            0,
            0,
            at,
        )
        for i, text in enumerate(awkward)
    ]
    if skipping_conflicts:
        by_key = dict(
            rows_insert_returning(Item, _COLUMNS, rows, returning=("key", "id"), ignore_conflicts=True)
        )
        ids = [by_key[row[1]] for row in rows]
    else:
        ids = rows_insert(Item, _COLUMNS, rows, returning=True)
    stored = {item.pk: item for item in Item.objects.filter(pk__in=ids)}
    for pk, row in zip(ids, rows, strict=True):
        item = stored[pk]
        assert (item.key, item.t2i_model, item.seed, item.params, item.question_keys, item.created_at) == (
            row[1],
            row[3],
            row[4],
            row[6],
            row[8],
            at,
        )


def test_a_row_that_breaks_a_constraint_raises_djangos_integrity_error_and_writes_nothing(study):
    from django.db import IntegrityError, transaction

    rows = _rows(study, 5)
    rows_insert(Item, _COLUMNS, rows[:1])
    with pytest.raises(IntegrityError), transaction.atomic():
        rows_insert(Item, _COLUMNS, rows)  # the first row's (study, key) is taken
    assert Item.objects.filter(study=study).count() == 1


def test_is_in_finds_the_rows_of_in_with_one_array_parameter_on_postgresql(study):
    """``IsIn`` on a queryset: the rows ``__in`` finds; on PostgreSQL one array parameter instead
    of one placeholder per value, typed as the column (ids and text alike)."""
    from django.db import connection
    from django.db.models import F
    from django.test.utils import CaptureQueriesContext

    from studies.batching import IsIn

    ids = rows_insert(Item, _COLUMNS, _rows(study, 12), returning=True)
    wanted = [*ids[1::3], max(ids) + 1000]  # one id no row has
    keys = list(Item.objects.filter(pk__in=ids[:4]).values_list("key", flat=True))
    with CaptureQueriesContext(connection) as queries:
        by_id = sorted(Item.objects.filter(IsIn(F("id"), wanted)).values_list("pk", flat=True))
        by_key = sorted(Item.objects.filter(IsIn(F("key"), keys), study=study).values_list("key", flat=True))
    assert (
        by_id == sorted(Item.objects.filter(pk__in=wanted).values_list("pk", flat=True)) == sorted(ids[1::3])
    )
    assert by_key == sorted(keys)
    sql = [query["sql"] for query in queries.captured_queries]
    if connection.vendor == "postgresql":
        assert all("= ANY(" in text and " IN (" not in text for text in sql)
    else:
        assert all(" IN (" in text for text in sql)
