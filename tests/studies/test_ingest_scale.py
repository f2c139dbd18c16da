"""import_images at scale (issue 23): the manifest is streamed in bounded batches, rows of one
item or one content may lie in different batches, and no statement carries more bound values
than the database allows.

Sizes are pinned small: SQLite's own variable limit is lowered on the test connection and the
import's batch size and limit are set to match, so 150 rows prove what 1,000,000 would."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from django.core.management import call_command

from studies import ingest
from studies.errors import ImportRejected
from studies.imports import manifest_rows, manifest_store
from studies.ingest import images_import
from studies.models import Image, Item, ItemChange, ItemImage
from tests.factories import StudyFactory, png_bytes
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db

HEADER = ["image", "t2i_model", "prompt", "category", "word", "seed"]


@pytest.fixture(params=["threads", "processes"])
def small(request, settings, monkeypatch):
    """Small batches and a lowered variable limit; the files checked by the import's threads, or
    (as a big import's are) by its worker processes."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 7
    settings.BIASLAB_IMPORT_PROCESSES = 2 if request.param == "processes" else 0
    monkeypatch.setattr(ingest, "PROCESS_MIN_FILES", 1)
    return request.param


def images_folder(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(n):
        (folder / f"{i}.png").write_bytes(png_bytes(i, size=8))
    return folder


def manifest(tmp_path: Path, rows: list[dict[str, object]], header: list[str] = HEADER) -> Path:
    path = tmp_path / "manifest.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def row(i: int, **extra: object) -> dict[str, object]:
    return {
        "image": f"{i}.png",
        "t2i_model": "sdxl",
        "prompt": f"a photo of a {i % 5}",
        "category": "job",
        "word": str(i % 5),
        "seed": i,
        **extra,
    }


def test_more_images_than_the_variable_limit_allows_in_one_statement_are_imported_and_reimported(
    small, tmp_path
):
    n = 150
    root = images_folder(tmp_path, n)
    study = StudyFactory(slug="big")
    path = manifest(tmp_path, [row(i) for i in range(n)])
    with sqlite_variable_limit(LIMIT):
        first = images_import(study=study, manifest_path=path, root=root)
        again = images_import(study=study, manifest_path=path, root=root)
    assert (first.accepted, first.rejected) == (n, [])
    assert (again.accepted, again.duplicates, again.rejected) == (0, n, [])
    assert Item.objects.filter(study=study).count() == n
    assert list(Item.objects.filter(study=study).order_by("id").values_list("key", flat=True)[:3]) == [
        "0.png",
        "1.png",
        "2.png",
    ]


def test_a_reimport_that_changes_metadata_updates_every_item_in_batches(small, tmp_path):
    n = 100
    root = images_folder(tmp_path, n)
    study = StudyFactory(slug="big")
    images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(n)]), root=root)
    changed = manifest(tmp_path, [row(i, t2i_model="sd-1.5") for i in range(n)])
    with sqlite_variable_limit(LIMIT):
        summary = images_import(study=study, manifest_path=changed, root=root)
    assert len(summary.updated) == n
    assert set(Item.objects.filter(study=study).values_list("t2i_model", flat=True)) == {"sd-1.5"}
    assert ItemChange.objects.filter(study=study).count() == n


def staged_rows_counted(monkeypatch) -> list[int]:
    """The number of rows each import left in its staging table of rows, read as it closes."""
    counts: list[int] = []
    close = manifest_rows.Staging.close

    def counted(staging):
        counts.append(staging.one("SELECT count(*) FROM plans")[0])
        close(staging)

    monkeypatch.setattr(manifest_rows.Staging, "close", counted)
    return counts


def test_a_rerun_of_one_image_items_settles_them_in_their_batch_and_stages_no_row(
    small, tmp_path, monkeypatch
):
    n = 40
    root = images_folder(tmp_path, n)
    study = StudyFactory(slug="big")
    images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(n)]), root=root)
    staged = staged_rows_counted(monkeypatch)
    rows = [row(i, t2i_model="sd-1.5") if i in (3, 30) else row(i) for i in range(n)]
    rows.append(row(7))  # a repeated path, refused alone
    with sqlite_variable_limit(LIMIT):
        summary = images_import(study=study, manifest_path=manifest(tmp_path, rows), root=root)
    assert staged == [0]
    assert [update.key for update in summary.updated] == ["3.png", "30.png"]
    assert (summary.accepted, summary.duplicates) == (0, n - 2)
    assert [r.row for r in summary.rejected] == [n + 2]
    assert Item.objects.get(study=study, key="30.png").t2i_model == "sd-1.5"


def test_an_item_another_import_created_after_the_check_gets_its_image_linked(small, tmp_path, monkeypatch):
    root = images_folder(tmp_path, 12)
    study = StudyFactory(slug="big")
    files_store = ingest._ManifestImport._files_store

    def meanwhile(self):
        Item.objects.create(study=study, key="5.png", t2i_model="sdxl")
        files_store(self)

    monkeypatch.setattr(ingest._ManifestImport, "_files_store", meanwhile)
    summary = images_import(
        study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(12)]), root=root
    )
    assert (summary.accepted, summary.rejected) == (12, [])
    assert Item.objects.filter(study=study).count() == 12
    link = ItemImage.objects.get(item__study=study, item__key="5.png")
    assert link.image.sha256 == hashlib.sha256((root / "5.png").read_bytes()).hexdigest()


def test_bad_rows_in_several_batches_are_all_reported_and_none_written(small, tmp_path):
    root = images_folder(tmp_path, 30)
    study = StudyFactory(slug="big")
    rows = [row(i) for i in range(30)]
    rows[3]["seed"] = "x"
    rows[25]["image"] = "missing.png"
    summary = images_import(study=study, manifest_path=manifest(tmp_path, rows), root=root)
    assert [r.row for r in summary.rejected] == [5, 27]
    assert summary.accepted == 28
    assert "3.png" not in set(Item.objects.values_list("key", flat=True))


def test_rows_refused_in_overlapping_batches_are_reported_in_file_order(small, tmp_path):
    """The next batch's rows are planned while a batch's files are checked: a row refused by its
    values in batch 2 is found before a row of batch 1 refused by its file, and is still listed
    after it."""
    root = images_folder(tmp_path, 20)
    (root / "1.png").write_bytes(b"not a png")
    study = StudyFactory(slug="big")
    rows = [row(i) for i in range(20)]
    rows[8]["seed"] = "x"  # row 10, batch 2
    summary = images_import(study=study, manifest_path=manifest(tmp_path, rows), root=root)
    assert [r.row for r in summary.rejected] == [3, 10]
    assert summary.accepted == 18


def test_the_same_content_in_a_later_batch_names_the_first_row_and_its_path(small, tmp_path):
    root = images_folder(tmp_path, 20)
    (root / "copy.png").write_bytes((root / "2.png").read_bytes())
    study = StudyFactory(slug="big")
    rows = [row(i) for i in range(20)] + [row(99, image="copy.png")]
    summary = images_import(study=study, manifest_path=manifest(tmp_path, rows), root=root)
    assert [str(r) for r in summary.rejected] == [
        "row 22 (copy.png): duplicate row: same image content as row 4 (2.png)"
    ]


def test_a_repeated_path_in_a_later_batch_is_a_duplicate_row(small, tmp_path):
    root = images_folder(tmp_path, 20)
    study = StudyFactory(slug="big")
    rows = [row(i) for i in range(20)] + [row(1)]
    summary = images_import(study=study, manifest_path=manifest(tmp_path, rows), root=root)
    assert [str(r) for r in summary.rejected] == ["row 22 (1.png): duplicate row: same image path as row 3"]
    assert summary.accepted == 20


def test_the_rows_of_a_pair_in_different_batches_make_one_item_and_a_bad_one_refuses_it(small, tmp_path):
    root = images_folder(tmp_path, 40)
    study = StudyFactory(slug="pairs", protocol="pair_change")
    header = ["image", "item", "role"]
    rows = [{"image": f"{i}.png", "item": f"pair{i}", "role": "input"} for i in range(20)]
    rows += [{"image": f"{20 + i}.png", "item": f"pair{i}", "role": "output"} for i in range(20)]
    rows[25]["image"] = "missing.png"  # pair5's output, 20 rows after its input
    summary = images_import(study=study, manifest_path=manifest(tmp_path, rows, header), root=root)
    assert summary.accepted == 38
    reasons = {r.row: r.reason for r in summary.rejected}
    assert set(reasons) == {7, 27}
    assert reasons[7] == "item pair5 has a refused row (row 27): the item is not imported"
    assert Item.objects.filter(study=study).count() == 19
    assert ItemImage.objects.filter(item__key="pair0").count() == 2


def test_a_dry_run_streams_too_and_writes_nothing(small, tmp_path):
    root = images_folder(tmp_path, 20)
    study = StudyFactory(slug="big")
    summary = images_import(
        study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(20)]), root=root, dry_run=True
    )
    assert summary.accepted == 20
    assert not Item.objects.exists()
    assert not Image.objects.exists()


def test_a_failed_write_in_a_late_chunk_leaves_no_row_and_no_file(small, tmp_path, settings, monkeypatch):
    root = images_folder(tmp_path, 120)
    study = StudyFactory(slug="big")
    real = manifest_store.rows_insert
    calls = []

    def fail_late(model, names, rows, *args, **kwargs):
        if model is ItemImage:
            calls.append(len(rows))
            if len(calls) == 3:  # the third chunk of items: two are already written in the transaction
                raise RuntimeError("boom")
        return real(model, names, rows, *args, **kwargs)

    monkeypatch.setattr(manifest_store, "rows_insert", fail_late)
    with pytest.raises(RuntimeError):
        images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(120)]), root=root)
    assert len(calls) == 3
    assert not Item.objects.exists()
    assert not Image.objects.exists()
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def test_a_big_batch_has_its_files_read_by_worker_processes_and_a_small_one_by_threads(
    tmp_path, settings, monkeypatch
):
    settings.BIASLAB_IMPORT_PROCESSES = 2
    monkeypatch.setattr(ingest, "PROCESS_MIN_FILES", 10)
    readers = tmp_path / "readers"
    real = manifest_store.read_limited

    def noted(path):
        with open(readers, "a") as fh:  # one line per read, from whichever process reads
            fh.write(f"{os.getpid()} {Path(path).name}\n")
        return real(path)

    monkeypatch.setattr(manifest_store, "read_limited", noted)
    root = images_folder(tmp_path, 12)
    for path in root.iterdir():  # written long ago: the store step trusts their stamps, reads none again
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    study = StudyFactory(slug="big")
    summary = images_import(
        study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(12)]), root=root
    )
    assert summary.accepted == 12
    pids = {line.split()[0] for line in readers.read_text().splitlines()}
    assert str(os.getpid()) not in pids
    assert 1 <= len(pids) <= 2
    assert Image.objects.count() == 12
    assert all(
        (Path(settings.MEDIA_ROOT) / name).is_file() for name in Image.objects.values_list("file", flat=True)
    )

    readers.unlink()
    images_import(  # 9 files to read: fewer than PROCESS_MIN_FILES, the threads read them
        study=StudyFactory(slug="few"),
        manifest_path=manifest(tmp_path, [row(i) for i in range(9)]),
        root=root,
    )
    assert {line.split()[0] for line in readers.read_text().splitlines()} == {str(os.getpid())}

    readers.unlink()
    settings.BIASLAB_IMPORT_PROCESSES = 0  # threads only, whatever the batch
    images_import(
        study=StudyFactory(slug="threads"),
        manifest_path=manifest(tmp_path, [row(i) for i in range(12)]),
        root=root,
    )
    assert len(readers.read_text().splitlines()) == 12
    assert {line.split()[0] for line in readers.read_text().splitlines()} == {str(os.getpid())}


def test_files_stored_by_worker_processes_are_removed_when_the_import_is_interrupted(
    small, tmp_path, settings, monkeypatch
):
    """The worker processes' files are named only in their journals (their answers carry no
    name): an import interrupted in its second batch removes every file stored so far."""
    root = images_folder(tmp_path, 20)
    study = StudyFactory(slug="big")
    real = ingest._ManifestImport.row_settle

    def interrupt(self, plan, check):
        if plan.number == 10:  # the second batch of 7 rows
            raise KeyboardInterrupt
        return real(self, plan, check)

    monkeypatch.setattr(ingest._ManifestImport, "row_settle", interrupt)
    with pytest.raises(KeyboardInterrupt):
        images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(20)]), root=root)
    assert not Image.objects.exists()
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def test_a_worker_process_that_dies_stops_the_import_with_a_clear_error_and_leaves_nothing(
    tmp_path, settings, monkeypatch
):
    settings.BIASLAB_IMPORT_PROCESSES = 2
    settings.BIASLAB_IMPORT_BATCH_ROWS = 7
    monkeypatch.setattr(ingest, "PROCESS_MIN_FILES", 1)
    root = images_folder(tmp_path, 20)
    real = manifest_store.image_facts

    def crash_on_the_twelfth(data):
        if data == png_bytes(11, size=8):
            os._exit(1)  # as a decoder's fault would end the worker
        return real(data)

    monkeypatch.setattr(manifest_store, "image_facts", crash_on_the_twelfth)
    study = StudyFactory(slug="big")
    with pytest.raises(ImportRejected, match="a worker process checking the image files stopped abruptly"):
        images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(20)]), root=root)
    assert not Image.objects.exists()
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def test_reading_a_small_file_allocates_its_size_not_the_byte_limit(tmp_path):
    """Asking read() for the 256 MiB limit allocated (and mapped) 256 MiB per file."""
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes(1))
    tracemalloc.start()
    try:
        data = manifest_store.read_limited(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == png_bytes(1)
    assert peak < 1024 * 1024


def test_import_images_prints_a_progress_line_with_rows_per_second_on_a_long_import(
    small, tmp_path, monkeypatch
):
    from studies import progress

    root = images_folder(tmp_path, 20)
    StudyFactory(slug="big")
    path = manifest(tmp_path, [row(i) for i in range(20)])
    real = progress.Progress.__init__

    def every_batch(self, *args, **kwargs):  # "long": a line at every batch instead of every 10 s
        real(self, *args, **{**kwargs, "log_every": 0})

    monkeypatch.setattr(progress.Progress, "__init__", every_batch)
    err = io.StringIO()
    call_command(
        "import_images",
        "--study",
        "big",
        "--manifest",
        str(path),
        "--root",
        str(root),
        stdout=io.StringIO(),
        stderr=err,
    )
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("7 rows checked (")
    for stage in ("checked", "stored", "written"):
        assert any(line.startswith(f"20 rows {stage} (") and "/s, " in line for line in lines), stage
