"""Re-running import_images (issue 23): a file whose path, size and modification time match its
import is not read, hashed or verified again; a file that changed is, as on a first import."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from studies import ingest
from studies.imports import manifest_store
from studies.ingest import images_import
from studies.models import Item, ItemImage
from tests.factories import StudyFactory, png_bytes
from tests.sqlite_limits import LIMIT, sqlite_variable_limit
from tests.studies.test_ingest_scale import images_folder, manifest, row

pytestmark = pytest.mark.django_db

OLD_NS = 1_700_000_000_000_000_000  # 2023: files written long before their import


def age(root: Path) -> None:
    """Give every file an mtime well in the past (a freshly written file is not trusted)."""
    for path in root.rglob("*.png"):
        os.utime(path, ns=(OLD_NS, OLD_NS))


@pytest.fixture
def reads(monkeypatch):
    """Every path ``_read_limited`` reads during the import (the file check and the store)."""
    seen: list[str] = []
    real = manifest_store.read_limited

    def counted(path_or_file):
        if isinstance(path_or_file, str | os.PathLike):  # not the bytes handed on to validation
            seen.append(str(path_or_file))
        return real(path_or_file)

    monkeypatch.setattr(manifest_store, "read_limited", counted)
    return seen


@pytest.fixture
def hashes(monkeypatch):
    """How many times the import hashes bytes (any sha256 computed by studies.ingest)."""
    calls: list[int] = []
    real = manifest_store.hashlib.sha256

    class Counting:
        @staticmethod
        def sha256(data=b""):
            calls.append(len(data))
            return real(data)

    monkeypatch.setattr(manifest_store, "hashlib", Counting)
    return calls


def test_a_rerun_with_unchanged_files_reads_and_hashes_none_of_them(tmp_path, reads, hashes):
    root = images_folder(tmp_path, 6)
    age(root)
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(6)])
    first = images_import(study=study, manifest_path=path, root=root)
    assert (first.accepted, first.unchanged_files) == (6, 0)
    assert len(reads) == 6  # read once: checked and stored from the same bytes
    assert len(hashes) >= 6
    stamps = set(ItemImage.objects.values_list("source_path", "file_size", "file_mtime_ns"))
    assert stamps == {(f"{i}.png", (root / f"{i}.png").stat().st_size, OLD_NS) for i in range(6)}
    reads.clear()
    hashes.clear()
    again = images_import(study=study, manifest_path=path, root=root)
    assert (again.accepted, again.duplicates, again.unchanged_files, again.rejected) == (0, 6, 6, [])
    assert reads == []
    assert hashes == []
    assert "rows whose file is unchanged since its import (not read again): 6" in again.lines()


def test_a_file_whose_content_changed_is_hashed_and_refused_as_today(tmp_path, reads):
    root = images_folder(tmp_path, 3)
    age(root)
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(3)])
    images_import(study=study, manifest_path=path, root=root)
    (root / "1.png").write_bytes(png_bytes(99, size=9))  # other bytes, other size, new mtime
    os.utime(root / "1.png", ns=(OLD_NS + 5, OLD_NS + 5))
    reads.clear()
    again = images_import(study=study, manifest_path=path, root=root)
    assert reads == [str((root / "1.png").resolve())]
    assert (again.duplicates, again.unchanged_files) == (2, 2)
    assert [r.row for r in again.rejected] == [3]
    assert "1.png was already imported with different content" in again.rejected[0].reason


def test_same_size_but_a_new_mtime_is_read_again_and_its_new_stamp_kept(tmp_path, reads):
    root = images_folder(tmp_path, 3)
    age(root)
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(3)])
    images_import(study=study, manifest_path=path, root=root)
    os.utime(root / "2.png", ns=(OLD_NS + 1, OLD_NS + 1))  # touched: same bytes
    reads.clear()
    again = images_import(study=study, manifest_path=path, root=root)
    assert reads == [str((root / "2.png").resolve())]
    assert (again.duplicates, again.unchanged_files, again.rejected) == (3, 2, [])
    assert ItemImage.objects.get(source_path="2.png").file_mtime_ns == OLD_NS + 1
    reads.clear()
    third = images_import(study=study, manifest_path=path, root=root)
    assert reads == []
    assert third.unchanged_files == 3


def test_the_same_bytes_under_a_rewritten_file_of_another_content_are_checked(tmp_path, reads):
    """Same size and mtime, but the row now names another path for the item: read again."""
    root = images_folder(tmp_path, 2)
    age(root)
    study = StudyFactory(slug="re")
    header = ["image", "item", "t2i_model", "prompt", "category", "word", "seed"]
    images_import(study=study, manifest_path=manifest(tmp_path, [row(0, item="a")], header=header), root=root)
    (root / "copy.png").write_bytes((root / "0.png").read_bytes())
    os.utime(root / "copy.png", ns=(OLD_NS, OLD_NS))
    reads.clear()
    again = images_import(
        study=study,
        manifest_path=manifest(tmp_path, [{**row(0, item="a"), "image": "copy.png"}], header=header),
        root=root,
    )
    assert reads == [str((root / "copy.png").resolve())]
    assert (again.duplicates, again.unchanged_files, again.rejected) == (1, 0, [])


def test_a_file_modified_just_before_its_import_gets_no_stamp_and_is_read_again(tmp_path, reads):
    root = images_folder(tmp_path, 2)
    os.utime(root / "0.png", ns=(OLD_NS, OLD_NS))
    os.utime(root / "1.png", ns=(time.time_ns(), time.time_ns()))  # written a moment ago
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(2)])
    images_import(study=study, manifest_path=path, root=root)
    assert ItemImage.objects.get(source_path="1.png").file_mtime_ns is None
    reads.clear()
    again = images_import(study=study, manifest_path=path, root=root)
    assert reads == [str((root / "1.png").resolve())]
    assert (again.duplicates, again.unchanged_files) == (2, 1)


def test_a_dry_run_writes_no_stamp(tmp_path):
    root = images_folder(tmp_path, 2)
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(2)])
    images_import(study=study, manifest_path=path, root=root)  # fresh files: no stamps
    age(root)
    dry = images_import(study=study, manifest_path=path, root=root, dry_run=True)
    assert dry.duplicates == 2
    assert set(ItemImage.objects.values_list("file_mtime_ns", flat=True)) == {None}
    images_import(study=study, manifest_path=path, root=root)
    assert set(ItemImage.objects.values_list("file_mtime_ns", flat=True)) == {OLD_NS}


def test_a_metadata_change_is_still_found_when_no_file_is_read(tmp_path, reads):
    root = images_folder(tmp_path, 3)
    age(root)
    study = StudyFactory(slug="re")
    images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(3)]), root=root)
    reads.clear()
    summary = images_import(
        study=study, manifest_path=manifest(tmp_path, [row(i, t2i_model="flux") for i in range(3)]), root=root
    )
    assert reads == []
    assert len(summary.updated) == 3
    assert summary.unchanged_files == 3
    assert set(Item.objects.values_list("t2i_model", flat=True)) == {"flux"}


def test_rerunning_more_rows_than_the_variable_limit_stamps_and_skips_in_batches(tmp_path, settings, reads):
    """150 rows, 60 bound values per statement: the stamps written after an upgrade (rows
    imported before files were stamped) and the skipped re-run stay under the limit."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    settings.BIASLAB_IMPORT_BATCH_ROWS = 7
    n = 150
    root = images_folder(tmp_path, n)
    study = StudyFactory(slug="big")
    path = manifest(tmp_path, [row(i) for i in range(n)])
    with sqlite_variable_limit(LIMIT):
        images_import(study=study, manifest_path=path, root=root)
        ItemImage.objects.update(file_size=None, file_mtime_ns=None)  # as before migration 0008
        age(root)
        reads.clear()
        stamped = images_import(study=study, manifest_path=path, root=root)
        assert len(reads) == n
        assert stamped.duplicates == n
        assert ItemImage.objects.filter(file_mtime_ns=OLD_NS).count() == n
        reads.clear()
        again = images_import(study=study, manifest_path=path, root=root)
    assert reads == []
    assert (again.duplicates, again.unchanged_files, again.rejected) == (n, n, [])


def test_import_images_says_how_many_files_were_unchanged(tmp_path):
    root = images_folder(tmp_path, 2)
    age(root)
    study = StudyFactory(slug="re")
    path = manifest(tmp_path, [row(i) for i in range(2)])
    call_command("import_images", str(path), root=str(root), study=study.slug, stdout=io.StringIO())
    out = io.StringIO()
    call_command("import_images", str(path), root=str(root), study=study.slug, stdout=out)
    assert "duplicates (already imported, unchanged): 2" in out.getvalue()
    assert "rows whose file is unchanged since its import (not read again): 2" in out.getvalue()


def test_the_unchanged_files_line_does_not_claim_to_be_a_part_of_the_duplicates(tmp_path):
    """One item of three updated: two duplicates, three files not read again. The count is of
    rows not read, so it is a line of its own, not "of which" under the duplicates."""
    root = images_folder(tmp_path, 3)
    age(root)
    study = StudyFactory(slug="re")
    images_import(study=study, manifest_path=manifest(tmp_path, [row(i) for i in range(3)]), root=root)
    changed = [row(0, t2i_model="flux"), row(1), row(2)]
    summary = images_import(study=study, manifest_path=manifest(tmp_path, changed), root=root)
    assert (len(summary.updated), summary.duplicates, summary.unchanged_files) == (1, 2, 3)
    lines = summary.lines()
    assert "duplicates (already imported, unchanged): 2" in lines
    assert "rows whose file is unchanged since its import (not read again): 3" in lines
    assert not any("of which" in line for line in lines)


def test_a_stamped_file_that_changes_after_its_check_is_refused_and_its_stored_copy_removed(
    tmp_path, settings, monkeypatch
):
    """The check stores the bytes it verified; the store step only compares size and mtime with
    those seen before the read: a change refuses the row, and the copy goes again."""
    root = images_folder(tmp_path, 2)
    age(root)
    study = StudyFactory(slug="re")
    real_check = ingest._ManifestImport.file_check

    def check_then_change(self, job):
        result = real_check(self, job)
        plan, _ = job
        if plan.path == "1.png":
            (root / "1.png").write_bytes(png_bytes(99, size=9))
            os.utime(root / "1.png", ns=(OLD_NS + 7, OLD_NS + 7))
        return result

    monkeypatch.setattr(ingest._ManifestImport, "file_check", check_then_change)
    summary = images_import(study=study, manifest_path=manifest(tmp_path, [row(0), row(1)]), root=root)
    assert summary.accepted == 1
    assert [str(r) for r in summary.rejected] == [
        "row 3 (1.png): the file changed while it was being imported: import it again"
    ]
    assert list(Item.objects.values_list("key", flat=True)) == ["0.png"]
    assert len([p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]) == 1


def test_a_bad_line_further_down_the_file_leaves_no_stored_file(tmp_path, settings):
    """Files are stored while rows are checked: a file refused whole later removes them."""
    settings.BIASLAB_IMPORT_BATCH_ROWS = 1  # rows 2 and 3 are checked (and stored) first
    root = images_folder(tmp_path, 3)
    study = StudyFactory(slug="re")
    # A long row: the bad byte lies beyond the first block the CSV reader decodes.
    path = manifest(tmp_path, [row(0), row(1), row(2, prompt="p" * 20_000)])
    with open(path, "ab") as fh:
        fh.write(b"\xff\xfe,not utf-8\n")
    with pytest.raises(ingest.ImportRejected, match="not UTF-8"):
        images_import(study=study, manifest_path=path, root=root)
    assert not Item.objects.exists()
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]
