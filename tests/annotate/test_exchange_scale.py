"""Labels, ground truth and the export at scale (issue 23): imports read their file in bounded
batches and keep every statement under the variable limit; the export streams a chunk of
items at a time. Sizes are pinned small (SQLite's own limit lowered on the test connection,
the import's batch size and limit set to match)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotate.exports import ground_truth_export, ground_truth_rows, ground_truth_rows_stream
from annotate.imports import ground_truth_import, labels_import
from annotate.models import FinalLabel, Label
from studies.imports import pipeline
from studies.models import Item, ItemImage
from studies.selectors import study_questions
from tests.annotate.gender import label_import
from tests.factories import ItemFactory, PromptFactory
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db


@pytest.fixture
def small(settings):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 7


@pytest.fixture
def many(study):
    """150 one-image items of the gender study, created in bulk (no files needed here)."""
    prompt = PromptFactory(study=study)
    first = ItemFactory(prompt=prompt, key="k/0000.png")
    image = ItemImage.objects.get(item=first).image
    items = Item.objects.bulk_create(
        [Item(study=study, prompt=prompt, key=f"k/{n:04d}.png") for n in range(1, 150)]
    )
    ItemImage.objects.bulk_create(
        [ItemImage(item=item, image=image, role="image", source_path=item.key) for item in items]
    )
    return [first, *items]


def labels_csv(tmp_path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path = tmp_path / "labels.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "annotator", "label"])
        writer.writerows(rows)
    return path


def test_more_labels_than_the_variable_limit_allows_are_imported_and_a_rerun_changes_nothing(
    small, study, many, tmp_path
):
    rows = [
        (item.key, name, "male" if n % 2 else "female")
        for n, item in enumerate(many)
        for name in ("anna", "ben")
    ]
    path = labels_csv(tmp_path, rows)
    with sqlite_variable_limit(LIMIT):
        first = labels_import(study=study, csv_path=path)
        with CaptureQueriesContext(connection) as queries:
            again = labels_import(study=study, csv_path=path)
    assert (first.accepted, first.rejected) == (300, [])
    assert (again.accepted, again.duplicates, again.changed) == (0, 300, 0)
    assert Label.objects.count() == 300
    # Unchanged labels are read a batch at a time, no service call (no lock) per row.
    assert len(queries.captured_queries) < 300


def test_a_file_of_more_rows_than_are_kept_in_memory_is_staged_on_disk_and_imported_whole(
    small, study, many, tmp_path, monkeypatch
):
    """Checked rows are kept in memory up to STAGED_IN_MEMORY_ROWS, then every batch goes to
    disk, those held first: 300 rows in batches of 7, spilled from the third batch on."""
    monkeypatch.setattr(pipeline, "STAGED_IN_MEMORY_ROWS", 20)
    rows = [(item.key, name, "male") for item in many for name in ("anna", "ben")]
    summary = labels_import(study=study, csv_path=labels_csv(tmp_path, rows))
    assert (summary.accepted, summary.rejected) == (300, [])
    assert sorted(Label.objects.values_list("item__key", "annotator__username")) == sorted(
        (key, name) for key, name, _ in rows
    )


def test_staged_rows_come_back_in_order_from_memory_and_from_disk(monkeypatch):
    monkeypatch.setattr(pipeline, "STAGED_IN_MEMORY_ROWS", 5)
    for n_batches in (1, 4):  # 3 rows: memory; 12 rows: disk
        staged = pipeline.Spill()
        try:
            for b in range(n_batches):
                staged.add([(b, i) for i in range(3)])
            staged.add([])
            assert list(staged.batches()) == [[(b, i) for i in range(3)] for b in range(n_batches)]
            assert (staged.file is not None) == (n_batches > 1)
        finally:
            staged.close()


def test_a_batch_naming_more_items_than_an_in_list_may_hold_is_read_and_written_under_the_limit(
    settings, study, many, annotator_a, annotator_b, tmp_path
):
    """One batch of 300 rows naming 150 items, with 60 values per statement: every read of the
    import (items by path and by key, stored labels, agreed finals, the items for the rules,
    the batch's labels, seats and finals) is split into chunks, or SQLite refuses it."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 1000
    label_import(item=many[10], annotator=annotator_a, value="male")
    label_import(item=many[10], annotator=annotator_b, value="male")  # agreed before the import
    rows = [
        (item.key, name, "male" if n % 2 else "female")
        for n, item in enumerate(many)
        for name in ("anna", "ben")
    ]
    rows[21] = (many[10].key, "ben", "male")  # anna changes to female, ben stays: reopened
    by_key = tmp_path / "by-key.csv"
    with open(by_key, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["item", "annotator", "label"])
        writer.writerows(rows)
    with sqlite_variable_limit(LIMIT):
        first = labels_import(study=study, csv_path=labels_csv(tmp_path, rows))  # by image path
        again = labels_import(study=study, csv_path=by_key)
    assert (first.accepted, first.changed, first.duplicates, first.rejected) == (298, 1, 1, [])
    assert first.reopened == [many[10].key]
    assert (again.accepted, again.changed, again.duplicates, again.rejected) == (0, 0, 300, [])
    assert Label.objects.count() == 300
    assert FinalLabel.objects.count() == 149  # every item's pair agrees but many[10]'s
    assert set(Item.objects.values_list("completed_seats", flat=True)) == {2}


def test_bad_label_rows_in_several_batches_are_all_reported_and_nothing_is_written(
    small, study, many, tmp_path
):
    rows = [(item.key, "anna", "male") for item in many[:40]]
    rows[2] = ("k/0002.png", "anna", "maybe")
    rows[35] = ("nowhere.png", "anna", "male")
    summary = labels_import(study=study, csv_path=labels_csv(tmp_path, rows))
    assert [r.row for r in summary.rejected] == [4, 37]
    assert summary.accepted == 0
    assert not Label.objects.exists()


def test_a_duplicate_label_row_in_a_later_batch_is_found(small, study, many, tmp_path):
    rows = [(item.key, "anna", "male") for item in many[:20]] + [(many[1].key, "anna", "female")]
    summary = labels_import(study=study, csv_path=labels_csv(tmp_path, rows))
    assert [str(r) for r in summary.rejected] == [
        "row 22 (k/0001.png): duplicate row: same item, question and annotator as row 3"
    ]


def test_a_change_in_a_late_batch_reopens_an_agreed_final(
    small, study, many, annotator_a, annotator_b, tmp_path
):
    label_import(item=many[30], annotator=annotator_a, value="male")
    label_import(item=many[30], annotator=annotator_b, value="male")
    assert FinalLabel.objects.filter(item=many[30]).exists()
    rows = [(item.key, "cleo", "male") for item in many[:25]] + [(many[30].key, "anna", "female")]
    summary = labels_import(study=study, csv_path=labels_csv(tmp_path, rows))
    assert summary.changed == 1
    assert summary.reopened == [many[30].key]


def test_ground_truth_of_many_items_is_imported_in_batches_and_a_rerun_changes_nothing(
    small, study, many, researcher, tmp_path
):
    path = tmp_path / "truth.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "label"])
        writer.writerows([(item.key, "female") for item in many])
    with sqlite_variable_limit(LIMIT):
        first = ground_truth_import(study=study, csv_path=path, user=researcher)
        again = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert (first.accepted, first.rejected) == (150, [])
    assert (again.accepted, again.duplicates) == (0, 150)
    assert FinalLabel.objects.count() == 150


def test_the_export_streams_a_chunk_of_items_at_a_time_and_says_the_same(study, many, annotator_a):
    label_import(item=many[3], annotator=annotator_a, value="male")
    with CaptureQueriesContext(connection) as queries:
        streamed = list(ground_truth_rows_stream(study=study, chunk=20))
    item_pages = [
        q for q in queries.captured_queries if 'FROM "studies_item"' in q["sql"] and "LIMIT 20" in q["sql"]
    ]
    assert len(item_pages) == 9  # 8 pages of at most 20 items, then an empty one
    assert streamed == ground_truth_rows(study=study)
    assert len(streamed) == 150
    assert streamed[3]["label_1"] == "male"


def test_the_json_export_written_row_by_row_is_the_document_json_dumps_would_write(study, many, annotator_a):
    label_import(item=many[0], annotator=annotator_a, value="female")
    questions = study_questions(study)
    rows = ground_truth_rows(study=study)
    document = {
        "study": study.slug,
        "protocol": study.protocol,
        "labels": questions[0].values,
        "questions": [{"key": q.key, "text": q.text, "values": q.values} for q in questions],
        "columns": list(rows[0]),
        "rows": rows,
    }
    assert (
        ground_truth_export(study=study, fmt="json")
        == json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    )


def test_the_json_export_of_a_study_without_items_is_valid(study):
    assert json.loads(ground_truth_export(study=study, fmt="json"))["rows"] == []


def test_export_ground_truth_writes_its_file_with_a_progress_line_on_a_long_export(
    study, many, tmp_path, monkeypatch
):
    from studies import progress

    real = progress.Progress.__init__

    def every_chunk(self, *args, **kwargs):  # "long": a line at every chunk instead of every 10 s
        real(self, *args, **{**kwargs, "log_every": 0})

    monkeypatch.setattr(progress.Progress, "__init__", every_chunk)
    out, err = tmp_path / "gt.csv", io.StringIO()
    call_command("export_ground_truth", "--study", study.slug, "--output", str(out), stderr=err)
    assert len(list(csv.DictReader(out.open()))) == 150
    assert any(
        line.startswith("150 rows exported (") and "/s, " in line for line in err.getvalue().splitlines()
    )


def test_the_disputes_page_of_more_disputes_than_an_in_list_may_hold_reads_them_under_the_limit(
    small, study, many, researcher, client_for, tmp_path
):
    """Every labelled item disputed (anna and ben disagree on all 150): the page finds the
    disputed pairs among them with reads split under the variable limit, and shows its 50.
    SQLite's own limit at 120 here: the page's read of its 50 items carries more values than the
    60 the chunks are cut for, fewer than the 150 items."""
    rows = [(item.key, name, value) for item in many for name, value in (("anna", "male"), ("ben", "female"))]
    assert labels_import(study=study, csv_path=labels_csv(tmp_path, rows)).accepted == 300
    client = client_for(researcher)
    with sqlite_variable_limit(120):
        first = client.get(f"/annotate/{study.slug}/disputes/")
        last = client.get(f"/annotate/{study.slug}/disputes/?page=3")
    assert first.status_code == last.status_code == 200
    assert first.context["page"].paginator.count == 150
    assert [row["item"].key for row in first.context["page"].object_list] == [i.key for i in many[:50]]
    assert [row["item"].key for row in last.context["page"].object_list] == [i.key for i in many[100:]]
    assert {label["annotator"] for label in last.context["page"].object_list[0]["labels"]} == {"anna", "ben"}


def test_the_disputes_api_lists_more_disputes_than_an_in_list_may_hold_with_their_images(
    small, study, many, researcher, api_for, tmp_path
):
    """``GET /api/disputes/`` has no page: every disputed item's images are read, a chunk at a
    time. SQLite's own limit at 120: fewer than the 150 disputed items."""
    rows = [(item.key, name, value) for item in many for name, value in (("anna", "male"), ("ben", "female"))]
    assert labels_import(study=study, csv_path=labels_csv(tmp_path, rows)).accepted == 300
    with sqlite_variable_limit(120):
        response = api_for(researcher).get(f"/api/disputes/?study={study.slug}")
    assert response.status_code == 200
    body = response.json()
    assert [row["key"] for row in body] == [item.key for item in many]
    assert {row["source_path"] for row in body} == {item.key for item in many}
    assert all(len(row["images"]) == 1 and row["url"] for row in body)
    assert {label["annotator"] for label in body[-1]["labels"]} == {"anna", "ben"}
