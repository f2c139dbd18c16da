"""The key press costs the same in a study of any size.

The claim probe's progress counts once counted every open item of the study; they now count the
claimable items only up to ``PROGRESS_COUNT_CAP``. These tests pin that: the statement's work
(SQLite's virtual machine steps, PostgreSQL's rows read per plan node) does not grow with the
study, the count is exact up to the cap and flagged beyond it, and the statistics helper the
bulk importers call leaves the planner statistics behind.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from annotate import selectors
from annotate import sql as rows
from annotate.models import Label
from annotate.services import assignment_queue
from studies.database import SQLITE_BULK_CACHE_KIB, bulk_page_cache, database_analyze
from studies.models import Item, Study
from tests.annotate.gender import submit


def _bulk_items(study: Study, count: int, *, start: int = 0) -> None:
    Item.objects.bulk_create(
        [Item(study=study, key=f"bulk/{start + n:07d}.png") for n in range(count)], batch_size=2000
    )


def _probe_work(study: Study, annotator: Any) -> int:
    """How much work the database does for the key press's progress counts: SQLite's virtual
    machine steps (in units of 100), PostgreSQL's rows produced by every plan node."""
    sql, params = selectors.progress_statement(study=study, annotator=annotator, now=timezone.now())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            return _rows_read(plan[0]["Plan"])
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        raw = connection.connection
        raw.set_progress_handler(count, 100)
        try:
            cursor.execute(sql, params)
            cursor.fetchall()
        finally:
            raw.set_progress_handler(None, 100)
        return steps[0]


def _rows_read(node: dict[str, Any]) -> int:
    own = int(node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
    return own + sum(_rows_read(child) for child in node.get("Plans", []))


@pytest.mark.parametrize(
    "cap", [pytest.param(None, marks=pytest.mark.scale, id="cap-as-shipped"), pytest.param(100, id="cap-100")]
)
def test_progress_counts_cost_the_same_in_a_study_ten_times_larger(
    study, annotator_a, annotator_b, monkeypatch, cap
):
    # The shipped cap (1,000) makes studies of 2,000 and 20,000 items: the slow tier's. The fast
    # tier's case lowers the cap, and the statement built with it, to make them ten times smaller.
    if cap is not None:
        monkeypatch.setattr(rows, "PROGRESS_COUNT_CAP", cap)
        monkeypatch.setattr(rows, "_STATEMENTS", {})
    cap = rows.PROGRESS_COUNT_CAP
    _bulk_items(study, 2 * cap)
    seat = assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    submit(item=seat.item, annotator=annotator_a, value="male")
    assignment_queue(study=study, annotator=annotator_b, size=2)  # open seats of someone else
    database_analyze()
    small = _probe_work(study, annotator_a)
    _bulk_items(study, 18 * cap, start=2 * cap)
    database_analyze()
    large = _probe_work(study, annotator_a)
    # The old counts read every open item: ten times the work here.
    assert large < 1.3 * small, (small, large)


def test_progress_is_exact_up_to_the_cap_and_a_lower_bound_beyond(study, annotator_a):
    cap = rows.PROGRESS_COUNT_CAP
    _bulk_items(study, cap)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(0, cap)
    _bulk_items(study, 5, start=cap)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(
        0, cap, more=True
    )
    # The open seats come on top of the capped count: two held, the cap still claimable.
    assignment_queue(study=study, annotator=annotator_a, size=2)
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(
        0, cap + 2, more=True
    )


def test_a_caller_may_count_fewer_items_left_and_only_within_its_block(study, annotator_a):
    _bulk_items(study, 30)
    with selectors.progress_counted_up_to(20):
        assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(
            0, 20, more=True
        )
    assert selectors.annotator_progress(study=study, annotator=annotator_a) == selectors.Progress(0, 30)


def test_labeling_screen_shows_a_capped_count_with_a_plus(study, annotator_a, client_for):
    _bulk_items(study, rows.PROGRESS_COUNT_CAP + 5)
    url = reverse("annotate:label_study", args=[study.slug])
    html = client_for(annotator_a).get(url).content.decode()
    assert f"<strong>{rows.PROGRESS_COUNT_CAP + 2}+</strong> remaining" in html


def test_database_analyze_leaves_planner_statistics_of_the_items(study):
    _bulk_items(study, 300)
    database_analyze()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [Item._meta.db_table])
            assert cursor.fetchone()[0] >= 300
        else:
            cursor.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = %s", [Item._meta.db_table])
            stats = [row[0] for row in cursor.fetchall()]
            assert stats
            assert all(int(stat.split()[0]) >= 300 for stat in stats)


@pytest.mark.django_db(transaction=True)
def test_database_analyze_vacuums_on_postgresql_outside_a_transaction_and_only_analyzes_inside(study):
    """The import commands ask for ``vacuum`` once their transaction committed: PostgreSQL marks
    the new rows visible (no first reader does it while a researcher waits). Inside a
    transaction VACUUM cannot run: the same call analyzes only, and does not fail."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's VACUUM")
    _bulk_items(study, 300)

    def vacuums() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT vacuum_count, analyze_count FROM pg_stat_user_tables WHERE relname = %s",
                [Item._meta.db_table],
            )
            return cursor.fetchone()

    before = vacuums()
    with transaction.atomic():
        database_analyze(models=[Item], vacuum=True)
    inside = vacuums()
    database_analyze(models=[Item], vacuum=True)
    outside = vacuums()
    assert inside[0] == before[0]  # no VACUUM inside the transaction …
    assert inside[1] == before[1] + 1  # … an ANALYZE
    assert outside == (before[0] + 1, before[1] + 2)
    with connection.cursor() as cursor:  # every page of the table marked all-visible
        cursor.execute(
            "SELECT relallvisible, relpages FROM pg_class WHERE relname = %s", [Item._meta.db_table]
        )
        all_visible, pages = cursor.fetchone()
    assert pages > 0
    assert all_visible == pages


@pytest.mark.django_db(transaction=True)
def test_the_import_labels_command_vacuums_the_label_tables_and_the_items_on_postgresql(
    study, make_items, tmp_path
):
    """The labels are new rows; the items' completed-seat counts were updated in place: both
    are marked visible again (the researcher pages' counts read the indexes alone)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's VACUUM")
    items = make_items(3)
    path = tmp_path / "labels.csv"
    path.write_text("image,annotator,label\n" + "".join(f"{item.key},zoe,male\n" for item in items))

    def vacuums() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname IN (%s, %s)",
                [Label._meta.db_table, Item._meta.db_table],
            )
            return dict(cursor.fetchall())

    before = vacuums()
    call_command("import_labels", str(path), study=study.slug, add_annotators=True, stdout=io.StringIO())
    after = vacuums()
    assert after == {table: n + 1 for table, n in before.items()}
    assert Item.objects.filter(completed_seats=1).count() == 3
    with connection.cursor() as cursor:  # every page of the items all-visible again
        cursor.execute(
            "SELECT relallvisible, relpages FROM pg_class WHERE relname = %s", [Item._meta.db_table]
        )
        all_visible, pages = cursor.fetchone()
    assert 0 < pages == all_visible


@pytest.mark.django_db
def test_bulk_page_cache_enlarges_sqlites_page_cache_for_the_block_and_restores_it():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's page cache")

    def cache_size() -> int:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA cache_size")
            return int(cursor.fetchone()[0])

    before = cache_size()
    assert before != -SQLITE_BULK_CACHE_KIB
    with bulk_page_cache():
        assert cache_size() == -SQLITE_BULK_CACHE_KIB
    assert cache_size() == before
    with pytest.raises(RuntimeError), bulk_page_cache():
        raise RuntimeError("an import that fails")
    assert cache_size() == before


def test_database_analyze_reads_the_whole_study_index_and_can_keep_to_named_tables(study):
    """A sampled ANALYZE read a one-study index of more rows than its sample as "sample size
    rows a study", and the planner then scanned the study for a lookup of keys."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's statistics table")
    _bulk_items(study, 2_500)
    database_analyze(models=[Item])
    with connection.cursor() as cursor:
        cursor.execute("SELECT tbl, idx, stat FROM sqlite_stat1")
        stats = {(tbl, idx): stat for tbl, idx, stat in cursor.fetchall()}
    assert {tbl for tbl, _ in stats} == {Item._meta.db_table}
    with connection.cursor() as cursor:
        # The indexes that lead with the study (its keys' unique constraint, the work queue…).
        by_study = []
        for _, idx in stats:
            cursor.execute(f"PRAGMA index_info({connection.ops.quote_name(idx)})")
            if [name for _, _, name in cursor.fetchall()][:1] == ["study_id"]:
                by_study.append(idx)
    assert len(by_study) >= 2
    assert all(stats[(Item._meta.db_table, idx)].split()[:2] == ["2500", "2500"] for idx in by_study)


def _statistics_rows(table: str) -> float | None:
    """How many rows the planner statistics say ``table`` holds; None without statistics."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
            return cursor.fetchone()[0]
        cursor.execute("SELECT name FROM sqlite_master WHERE name = 'sqlite_stat1'")
        if cursor.fetchone() is None:
            return None
        cursor.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = %s", [table])
        row = cursor.fetchone()
        return None if row is None else float(row[0].split()[0])


def test_the_import_labels_command_leaves_planner_statistics(study, make_items, tmp_path):
    items = make_items(3)
    path = tmp_path / "labels.csv"
    path.write_text("image,annotator,label\n" + "".join(f"{item.key},zoe,male\n" for item in items))
    if connection.vendor == "sqlite":
        assert _statistics_rows(Label._meta.db_table) is None
    call_command("import_labels", str(path), study=study.slug, add_annotators=True, stdout=io.StringIO())
    assert Label.objects.count() == 3
    # ANALYZE inside the import's transaction counts its own new rows.
    assert _statistics_rows(Label._meta.db_table) == 3


def test_progress_plan_reads_items_only_by_key_or_along_the_work_index(study, annotator_a):
    """The done and open-seat counts start from the annotator's seats, never from the study's
    items (SQLite chose the study's million items at 1,000,000 with statistics: 0.7 s)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's plan; PostgreSQL's cost is pinned by the test above")
    _bulk_items(study, 50)
    database_analyze()
    sql, params = selectors.progress_statement(study=study, annotator=annotator_a, now=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = [row[3] for row in cursor.fetchall()]
    on_items = [step for step in plan if step.startswith(("SEARCH i ", "SCAN i"))]
    assert on_items
    assert all("INTEGER PRIMARY KEY" in step or "item_queue_work_idx" in step for step in on_items), plan


def test_postgresql_connections_do_not_compile_statements_just_in_time(db):
    """JIT compiled the key press's claim statement first at 250,000+ items (its estimated cost
    grows with the study): 640 ms of 680 at 1,000,000."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
