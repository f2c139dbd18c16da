"""import_predictions at scale (issue 23): the file is read in bounded batches, and no statement
carries more bound values than the database allows, however many rows the file has.

The variable limit is pinned for real: SQLite's own limit is lowered on the test connection
(``sqlite3.Connection.setlimit``), so a statement over it fails exactly as one over 32,766 does
on a stock SQLite; the import's own limit and batch size are made as small to match."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from detectors.imports import PredictionImportRejected, predictions_import
from detectors.models import Prediction
from studies.models import Image, ImageRole, Item, ItemImage
from tests.factories import StudyFactory
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db


def many_images(n: int) -> list[str]:
    """``n`` one-image items of a fresh study, created in bulk; returns their paths."""
    study = StudyFactory(slug="big")
    images = Image.objects.bulk_create(
        [
            Image(sha256=f"{i:064x}", file=f"images/{i:064x}.png", width=8, height=8, format="PNG")
            for i in range(n)
        ],
        batch_size=500,
    )
    paths = [f"big/{i:06d}.png" for i in range(n)]
    items = Item.objects.bulk_create([Item(study=study, key=path) for path in paths], batch_size=500)
    ItemImage.objects.bulk_create(
        [
            ItemImage(item=item, image=image, role=ImageRole.IMAGE, source_path=item.key)
            for item, image in zip(items, images, strict=True)
        ],
        batch_size=500,
    )
    return paths


def predictions_csv(tmp_path: Path, paths: list[str], *, bad: dict[int, str] | None = None) -> Path:
    path = tmp_path / "preds.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "detector", "prediction"])
        for n, image in enumerate(paths):
            writer.writerow([image, "clip", (bad or {}).get(n, "male" if n % 2 else "female")])
    return path


def test_more_predictions_than_the_variable_limit_allows_in_one_statement_are_imported(tmp_path, settings):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 50
    paths = many_images(7 * LIMIT)
    csv_path = predictions_csv(tmp_path, paths)
    with sqlite_variable_limit(LIMIT), CaptureQueriesContext(connection) as queries:
        summary = predictions_import(csv_path=csv_path)
    assert summary.created == 7 * LIMIT
    assert Prediction.objects.filter(detector="clip").count() == 7 * LIMIT
    # Several batches, several INSERTs: the batch size and the limit were both used.
    inserts = [
        q for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "detectors_prediction"')
    ]
    assert len(inserts) >= 7 * LIMIT // 50


def test_the_sqlite_limit_really_refuses_a_statement_over_it(tmp_path):
    """The pin above is real: over the lowered limit, SQLite refuses the statement."""
    many_images(3)
    with sqlite_variable_limit(2), pytest.raises(OperationalError, match="too many SQL variables"):
        list(Image.objects.filter(pk__in=[1, 2, 3]))


def test_a_bad_row_in_a_late_batch_writes_nothing_and_every_bad_row_is_named(tmp_path, settings):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 50
    paths = many_images(200)
    csv_path = predictions_csv(tmp_path, paths, bad={3: "maybe", 180: "nope"})
    with sqlite_variable_limit(LIMIT), pytest.raises(PredictionImportRejected) as refused:
        predictions_import(csv_path=csv_path)
    assert [e.split(":")[0] for e in refused.value.errors] == ["line 5", "line 182"]
    assert not Prediction.objects.exists()


def test_a_duplicate_in_another_batch_is_found(tmp_path, settings):
    settings.BIASLAB_IMPORT_BATCH_ROWS = 10
    paths = many_images(30)
    csv_path = predictions_csv(tmp_path, [*paths, paths[2]])
    with pytest.raises(PredictionImportRejected) as refused:
        predictions_import(csv_path=csv_path)
    assert refused.value.errors == ["line 32: duplicate of line 4 (same image, detector, version)"]
    assert not Prediction.objects.exists()


def test_a_rerun_finds_every_row_already_stored_across_batches(tmp_path, settings):
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 40
    paths = many_images(3 * LIMIT)
    csv_path = predictions_csv(tmp_path, paths)
    predictions_import(csv_path=csv_path)
    with sqlite_variable_limit(LIMIT):
        summary = predictions_import(csv_path=csv_path)
    assert (summary.created, summary.unchanged) == (0, 3 * LIMIT)
    changed = predictions_csv(tmp_path, paths, bad={n: "filtered" for n in range(3 * LIMIT)})
    with sqlite_variable_limit(LIMIT), pytest.raises(PredictionImportRejected) as refused:
        predictions_import(csv_path=changed)
    assert len(refused.value.errors) == 3 * LIMIT
    assert Prediction.objects.count() == 3 * LIMIT


def test_the_command_prints_a_progress_line_with_rows_per_second_on_a_long_import(
    tmp_path, settings, monkeypatch
):
    from studies import progress

    settings.BIASLAB_IMPORT_BATCH_ROWS = 10
    csv_path = predictions_csv(tmp_path, many_images(40))
    real = progress.Progress.__init__

    def every_batch(self, *args, **kwargs):  # "long": a line at every batch instead of every 10 s
        real(self, *args, **{**kwargs, "log_every": 0})

    monkeypatch.setattr(progress.Progress, "__init__", every_batch)
    err = io.StringIO()
    call_command("import_predictions", str(csv_path), stdout=io.StringIO(), stderr=err)
    lines = err.getvalue().splitlines()
    assert "10 rows checked (" in lines[0]
    assert any(line.startswith("40 rows checked (") and "/s, " in line for line in lines)
    assert any(line.startswith("40 rows written (") and "/s, " in line for line in lines)


@pytest.mark.scale
def test_more_predictions_than_sqlites_own_limit_of_32766_variables(tmp_path):
    """At the stock limit with the default settings: 33,000 rows, one file (was: "too many SQL
    variables" from the check of stored predictions)."""
    paths = many_images(33_000)
    csv_path = predictions_csv(tmp_path, paths)
    with sqlite_variable_limit(32_766):
        summary = predictions_import(csv_path=csv_path)
    assert summary.created == 33_000
    assert Prediction.objects.count() == 33_000
