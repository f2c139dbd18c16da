"""The flags the commands share (studies/commands.py): ``--output`` writes atomically,
an importer takes its file positionally with the old ``--manifest`` kept as an alias. The walk over
every command's flags is tests/test_command_flags.py."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, OutputWrapper

from studies.commands import output_stream, output_write
from studies.models import Item
from tests.factories import ItemFactory, PromptFactory, png_bytes
from tests.studies.test_ingest import row, write_manifest


def _leftovers(folder: Path, keep: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != keep)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of its own for the output (tmp_path also holds the tests' MEDIA_ROOT)."""
    path = tmp_path / "out"
    path.mkdir()
    return path


def test_output_replaces_the_file_only_once_the_document_is_complete(folder):
    target = folder / "report.md"
    target.write_text("old report\n", encoding="utf-8")
    with output_stream(str(target), OutputWrapper(io.StringIO())) as out:
        out.write("new ")
        assert target.read_text(encoding="utf-8") == "old report\n"  # not touched while writing
        out.write("report\n")
    assert target.read_text(encoding="utf-8") == "new report\n"
    assert _leftovers(folder, "report.md") == []


def _write_half(target: Path) -> None:
    with output_stream(str(target), OutputWrapper(io.StringIO())) as out:
        out.write("half a docu")
        raise RuntimeError("disk on fire")


def test_an_error_while_writing_leaves_the_old_file_and_no_half_document(folder):
    target = folder / "report.csv"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="disk on fire"):
        _write_half(target)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert _leftovers(folder, "report.csv") == []
    fresh = folder / "new.csv"
    with pytest.raises(RuntimeError, match="disk on fire"):
        _write_half(fresh)
    assert not fresh.exists()
    assert _leftovers(folder, "report.csv") == []


def test_a_new_file_gets_the_mode_open_would_give_and_a_replaced_one_keeps_its_own(tmp_path):
    fresh = tmp_path / "fresh.json"
    output_write("{}\n", str(fresh), OutputWrapper(io.StringIO()))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    shared = tmp_path / "shared.json"
    shared.write_text("[]\n", encoding="utf-8")
    shared.chmod(0o640)
    output_write("{}\n", str(shared), OutputWrapper(io.StringIO()))
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640


def test_a_missing_folder_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(CommandError, match=r"folder .*nope does not exist"):
        output_write("x", str(tmp_path / "nope" / "out.csv"), OutputWrapper(io.StringIO()))


def test_without_output_the_document_goes_to_standard_output():
    stdout = io.StringIO()
    output_write("a,b\n1,2\n", "", OutputWrapper(stdout))
    assert stdout.getvalue() == "a,b\n1,2\n"


@pytest.mark.django_db
def test_an_export_that_fails_midway_keeps_the_previous_export(study, folder, monkeypatch):
    ItemFactory(prompt=PromptFactory(study=study))
    target = folder / "truth.csv"
    call_command("export_ground_truth", "--output", str(target), stdout=io.StringIO(), stderr=io.StringIO())
    before = target.read_text(encoding="utf-8")
    assert before.startswith("item,question,image")

    def broken(*, study, fmt, out, progress):
        out.write("item,question\nhalf")
        raise RuntimeError("database went away")

    monkeypatch.setattr("annotate.management.commands.export_ground_truth.ground_truth_write", broken)
    with pytest.raises(RuntimeError, match="database went away"):
        call_command(
            "export_ground_truth", "--output", str(target), stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert target.read_text(encoding="utf-8") == before
    assert _leftovers(folder, "truth.csv") == []


@pytest.fixture
def manifest(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "images"
    (root / "sdxl").mkdir(parents=True)
    for n in range(2):
        (root / "sdxl" / f"{n}.png").write_bytes(png_bytes(n))
    return write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(2)]), root


def _import(*args: str) -> str:
    out = io.StringIO()
    call_command("import_images", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_import_images_takes_the_manifest_positionally(study, manifest):
    path, root = manifest
    assert "accepted: 2" in _import(str(path), "--root", str(root)).lower()
    assert sorted(Item.objects.values_list("key", flat=True)) == ["sdxl/0.png", "sdxl/1.png"]


@pytest.mark.django_db
def test_import_images_still_takes_manifest_as_an_alias(study, manifest):
    path, root = manifest
    _import("--manifest", str(path), "--root", str(root), "--study", "gender")
    assert Item.objects.filter(study=study).count() == 2
    # Both spellings naming the same file are one file; two different files are refused.
    _import(str(path), "--manifest", str(path), "--root", str(root))
    with pytest.raises(CommandError, match="give the file once"):
        _import(str(path), "--manifest", str(path.with_name("other.csv")), "--root", str(root))
    with pytest.raises(CommandError, match="give the manifest FILE and --root"):
        _import("--root", str(root))


@pytest.mark.django_db
def test_remove_items_takes_its_manifest_positionally_too(study, manifest):
    path, root = manifest
    _import(str(path), "--root", str(root))
    out = io.StringIO()
    call_command("remove_items", str(path), "--dry-run", stdout=out)
    assert "Would remove 2 item(s) from study 'gender'" in out.getvalue()
    with pytest.raises(CommandError, match="not allowed with"):
        call_command("remove_items", str(path), "--item", "sdxl/0.png", stdout=io.StringIO())
