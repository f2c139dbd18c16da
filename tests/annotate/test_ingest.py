"""Image validation, content-hash storage and the manifest importer (issue 2, sections 2 and "Bad input")."""

from __future__ import annotations

import csv
import io
import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from PIL import Image as PILImage

from annotate import ingest
from annotate.errors import ImportRejected
from annotate.ingest import (
    CorruptImage,
    DuplicateImage,
    EmptyImageFile,
    ImageFormatNotAllowed,
    ImagePathConflict,
    ImageTooLarge,
    NotAnImage,
    image_bytes_store,
    image_file_validate,
    images_import,
    prompt_get_or_create,
)
from annotate.models import Image, Prompt, Study
from tests.factories import png_bytes

HEADER = ["image", "t2i_model", "prompt", "category", "word", "seed", "index", "params"]


def bomb_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A PNG header claiming a huge canvas with a tiny (invalid) body: only the header is read."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    body = struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    idat = zlib.compress(b"\x00" * 64)
    idat_chunk = b"IDAT" + idat
    body += struct.pack(">I", len(idat)) + idat_chunk + struct.pack(">I", zlib.crc32(idat_chunk))
    return (
        b"\x89PNG\r\n\x1a\n" + body + struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    )


def gif_bytes() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (8, 8), (10, 20, 30)).save(buf, format="GIF")
    return buf.getvalue()


def write_manifest(path: Path, rows: list[dict[str, object]], header: list[str] = HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    return path


def row(path: str, n: int = 0, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "image": path,
        "t2i_model": "sdxl",
        "prompt": "a photo of one real person who is a lawyer",
        "category": "profession",
        "word": "lawyer",
        "seed": 100 + n,
        "index": n,
        "params": json.dumps({"steps": 30}),
    }
    base.update(extra)
    return base


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    (folder / "sdxl").mkdir(parents=True)
    for n in range(3):
        (folder / "sdxl" / f"{n}.png").write_bytes(png_bytes(n))
    return folder


# --- image_file_validate ----------------------------------------------------------------------


def test_a_small_png_is_valid_and_named_by_its_hash():
    validated = image_file_validate(png_bytes(1))
    assert validated.format == "PNG"
    assert (validated.width, validated.height) == (32, 32)
    assert validated.storage_name == f"images/{validated.sha256[:2]}/{validated.sha256}.png"


def test_an_empty_file_is_refused_as_empty():
    with pytest.raises(EmptyImageFile, match="0 bytes"):
        image_file_validate(b"")


def test_a_text_file_renamed_png_is_refused_as_not_an_image():
    with pytest.raises(NotAnImage, match="not an image"):
        image_file_validate(b"hello, I am not a picture\n" * 10)


def test_a_truncated_png_is_refused_as_corrupt():
    data = png_bytes(3, size=128)
    with pytest.raises(CorruptImage, match="corrupt or truncated"):
        image_file_validate(data[: len(data) // 2])


def test_a_png_with_damaged_data_is_refused_as_corrupt():
    data = bytearray(png_bytes(4, size=64))
    data[60:80] = b"\xff" * 20  # inside IDAT: the checksum no longer matches
    with pytest.raises(CorruptImage):
        image_file_validate(bytes(data))


def test_a_decompression_bomb_is_refused_from_its_header(settings):
    settings.BIASLAB_MAX_IMAGE_PIXELS = 1_000_000
    with pytest.raises(ImageTooLarge, match="decompression bomb"):
        image_file_validate(bomb_png())


def test_an_image_over_the_pixel_limit_is_refused(settings):
    settings.BIASLAB_MAX_IMAGE_PIXELS = 100
    with pytest.raises(ImageTooLarge, match="above the limit of 100"):
        image_file_validate(png_bytes(1))


def test_a_format_outside_the_allow_list_is_refused_by_name(settings):
    settings.BIASLAB_IMAGE_FORMATS = ["PNG", "JPEG"]
    with pytest.raises(ImageFormatNotAllowed, match="format GIF is not allowed"):
        image_file_validate(gif_bytes())


def test_a_file_over_the_byte_limit_is_refused_before_decoding(settings):
    settings.BIASLAB_MAX_IMAGE_BYTES = 10
    with pytest.raises(ImageTooLarge, match="larger than 10 bytes"):
        image_file_validate(png_bytes(1))


# --- image_bytes_store ------------------------------------------------------------------------


@pytest.fixture
def prompt(study):
    return prompt_get_or_create(study=study, category="profession", word="lawyer", text="a lawyer")


def test_prompt_get_or_create_returns_the_same_prompt_twice(study):
    first = prompt_get_or_create(study=study, category="profession", word="nurse", text="a nurse")
    again = prompt_get_or_create(study=study, category="profession", word="nurse", text="a nurse")
    assert first.pk == again.pk
    assert Prompt.objects.filter(study=study).count() == 1


def test_stored_image_lands_under_media_root_by_content_hash(study, prompt, settings):
    image, created = image_bytes_store(
        study=study, prompt=prompt, data=png_bytes(7), source_path="a/7.png", t2i_model="sdxl", seed=5
    )
    assert created
    assert image.file == f"images/{image.sha256[:2]}/{image.sha256}.png"
    assert (Path(settings.MEDIA_ROOT) / image.file).read_bytes() == png_bytes(7)
    assert (image.width, image.height, image.format, image.seed) == (32, 32, "PNG", 5)


def test_storing_the_same_path_and_bytes_again_returns_the_existing_image(study, prompt):
    first, _ = image_bytes_store(
        study=study, prompt=prompt, data=png_bytes(7), source_path="a.png", t2i_model="m"
    )
    again, created = image_bytes_store(
        study=study, prompt=prompt, data=png_bytes(7), source_path="a.png", t2i_model="m"
    )
    assert not created
    assert again.pk == first.pk
    assert Image.objects.count() == 1


def test_storing_the_same_bytes_under_another_path_is_a_duplicate(study, prompt):
    image_bytes_store(study=study, prompt=prompt, data=png_bytes(7), source_path="a.png", t2i_model="m")
    with pytest.raises(DuplicateImage, match=r"same image content as a\.png"):
        image_bytes_store(study=study, prompt=prompt, data=png_bytes(7), source_path="b.png", t2i_model="m")
    assert Image.objects.count() == 1


def test_storing_other_bytes_under_an_imported_path_is_a_conflict(study, prompt):
    image_bytes_store(study=study, prompt=prompt, data=png_bytes(7), source_path="a.png", t2i_model="m")
    with pytest.raises(ImagePathConflict, match="different content"):
        image_bytes_store(study=study, prompt=prompt, data=png_bytes(8), source_path="a.png", t2i_model="m")


def test_storing_a_corrupt_image_writes_no_row_and_no_file(study, prompt, settings):
    with pytest.raises(NotAnImage):
        image_bytes_store(study=study, prompt=prompt, data=b"nope" * 50, source_path="x.png", t2i_model="m")
    assert Image.objects.count() == 0
    assert not (Path(settings.MEDIA_ROOT) / "images").exists()


# --- images_import ------------------------------------------------------------------------------


def test_a_manifest_imports_every_row_with_its_prompt_and_metadata(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert (summary.accepted, summary.duplicates, summary.rejected) == (3, 0, [])
    image = Image.objects.get(source_path="sdxl/1.png")
    assert (image.t2i_model, image.seed, image.index, image.params) == ("sdxl", 101, 1, {"steps": 30})
    assert image.prompt.word == "lawyer"
    assert Prompt.objects.filter(study=study).count() == 1


def test_running_the_same_import_twice_changes_nothing(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    images_import(study=study, manifest_path=manifest, root=root)
    before = list(Image.objects.values_list("id", "source_path", "sha256", "file"))
    again = images_import(study=study, manifest_path=manifest, root=root)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 3, [])
    assert list(Image.objects.values_list("id", "source_path", "sha256", "file")) == before


def test_a_manifest_missing_columns_is_refused_whole_naming_the_columns(study, root, tmp_path):
    manifest = write_manifest(
        tmp_path / "m.csv", [row("sdxl/0.png")], header=["image", "prompt", "category", "seed"]
    )
    with pytest.raises(ImportRejected, match="missing required column\\(s\\): t2i_model, word"):
        images_import(study=study, manifest_path=manifest, root=root)
    assert Image.objects.count() == 0


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("../outside.png", "'..' refused"),
        ("sdxl/../../outside.png", "'..' refused"),
        ("/etc/passwd", "absolute path refused"),
        ("link-out.png", "resolves outside the import root"),
        ("sdxl/missing.png", "file not found"),
    ],
)
def test_a_row_pointing_outside_the_root_is_rejected(study, root, tmp_path, given, reason):
    (tmp_path / "outside.png").write_bytes(png_bytes(50))
    os.symlink(tmp_path / "outside.png", root / "link-out.png")
    manifest = write_manifest(tmp_path / "m.csv", [row(given), row("sdxl/0.png")])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 1
    assert [(r.row, r.path) for r in summary.rejected] == [(2, given)]
    assert reason in summary.rejected[0].reason
    assert not Image.objects.filter(source_path=given).exists()


def test_a_symlink_that_stays_inside_the_root_is_accepted(study, root, tmp_path):
    os.symlink(root / "sdxl" / "0.png", root / "alias.png")
    manifest = write_manifest(tmp_path / "m.csv", [row("alias.png")])
    assert images_import(study=study, manifest_path=manifest, root=root).accepted == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file (0 bytes)"),
        (b"just some text, renamed to png\n", "not an image"),
        (png_bytes(9, size=128)[:200], "corrupt or truncated"),
        (bomb_png(), "decompression bomb"),
    ],
    ids=["zero-bytes", "non-image", "truncated", "bomb"],
)
def test_a_bad_file_rejects_only_its_row_with_its_reason(study, root, tmp_path, settings, content, reason):
    settings.BIASLAB_MAX_IMAGE_PIXELS = 1_000_000
    (root / "bad.png").write_bytes(content)
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("bad.png"), row("sdxl/1.png", 1)])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 2
    assert len(summary.rejected) == 1
    assert (summary.rejected[0].row, summary.rejected[0].path) == (3, "bad.png")
    assert reason in summary.rejected[0].reason
    assert not Image.objects.filter(source_path="bad.png").exists()


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"seed": "abc"}, "seed must be an integer, got 'abc'"),
        ({"index": "-1"}, "index must be 0 or more"),
        ({"params": "{not json"}, "params is not valid JSON"),
        ({"params": "[1, 2]"}, "params must be a JSON object"),
        ({"word": ""}, "empty required value in column 'word'"),
    ],
)
def test_a_row_with_bad_values_is_rejected_with_its_reason(study, root, tmp_path, extra, reason):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png", **extra)])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 0
    assert summary.rejected[0].reason.startswith(reason)
    assert Image.objects.count() == 0
    assert Prompt.objects.count() == 0


def test_a_duplicate_row_in_the_manifest_is_rejected_naming_the_first_row(study, root, tmp_path):
    manifest = write_manifest(
        tmp_path / "m.csv", [row("sdxl/0.png"), row("sdxl/1.png", 1), row("sdxl/0.png")]
    )
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 2
    assert str(summary.rejected[0]) == "row 4 (sdxl/0.png): duplicate row: same image path as row 2"


def test_the_same_bytes_under_two_paths_import_once(study, root, tmp_path):
    (root / "copy.png").write_bytes((root / "sdxl" / "0.png").read_bytes())
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("copy.png")])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 1
    assert "same image content as row 2 (sdxl/0.png)" in summary.rejected[0].reason


def test_bytes_already_in_the_study_under_another_path_are_rejected(study, root, tmp_path):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    (root / "copy.png").write_bytes((root / "sdxl" / "0.png").read_bytes())
    summary = images_import(
        study=study, manifest_path=write_manifest(tmp_path / "b.csv", [row("copy.png")]), root=root
    )
    assert "same image content as sdxl/0.png, already in the study" in summary.rejected[0].reason


def test_a_changed_file_under_an_imported_path_is_rejected(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    images_import(study=study, manifest_path=manifest, root=root)
    (root / "sdxl" / "0.png").write_bytes(png_bytes(77))
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert "already imported with different content" in summary.rejected[0].reason


def test_the_same_image_may_live_in_two_studies(study, root, tmp_path):
    other = Study.objects.create(name="Other", slug="other")
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    images_import(study=study, manifest_path=manifest, root=root)
    assert images_import(study=other, manifest_path=manifest, root=root).accepted == 1


def test_chunks_are_written_as_they_come(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    seen: list[tuple[int, int]] = []

    def progress(summary, done):
        seen.append((done, Image.objects.filter(study=study).count()))

    images_import(study=study, manifest_path=manifest, root=root, chunk_size=2, progress=progress)
    assert seen == [(2, 2), (3, 3)]


def test_a_manifest_with_a_byte_order_mark_is_read(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    manifest.write_bytes(b"\xef\xbb\xbf" + manifest.read_bytes())
    assert images_import(study=study, manifest_path=manifest, root=root).accepted == 1


def test_a_manifest_that_is_not_utf8_is_refused(study, root, tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_bytes(",".join(HEADER).encode() + b"\n\xff\xfe\xfa,x\n")
    with pytest.raises(ImportRejected, match="not UTF-8"):
        images_import(study=study, manifest_path=manifest, root=root)


# --- import_images command ---------------------------------------------------------------------


def test_the_command_creates_the_study_and_prints_the_summary(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    out = io.StringIO()
    call_command("import_images", manifest=str(manifest), root=str(root), study="pilot", stdout=out)
    study = Study.objects.get(slug="pilot")
    assert study.label_values == ["male", "female", "low_quality", "other"]
    assert "accepted: 3 images" in out.getvalue()
    assert "rejected: 0" in out.getvalue()


def test_the_command_lists_rejected_rows_and_fails(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("../x.png")])
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 row\\(s\\) rejected"):
        call_command("import_images", manifest=str(manifest), root=str(root), stdout=out)
    assert "row 3 (../x.png): path with '..' refused" in out.getvalue()
    assert Image.objects.filter(study__slug="default").count() == 1


def test_the_command_refuses_a_manifest_missing_a_column(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")], header=["image", "t2i_model"])
    with pytest.raises(CommandError, match="missing required column\\(s\\): prompt, category, word"):
        call_command("import_images", manifest=str(manifest), root=str(root), stdout=io.StringIO())
    assert not Study.objects.filter(slug="default").exists()


def test_format_names_in_settings_are_read_leniently(settings):
    settings.BIASLAB_IMAGE_FORMATS = ["jpg", "png", "NOT-A-FORMAT"]
    assert ingest.allowed_formats() == ["JPEG", "PNG"]
    assert image_file_validate(png_bytes(1)).format == "PNG"


def test_the_command_refuses_a_study_slug_that_is_not_a_slug(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    with pytest.raises(CommandError, match="study slug 'my study!' must contain only"):
        call_command("import_images", manifest=str(manifest), root=str(root), study="my study!")
    assert not Study.objects.exists()


@pytest.mark.django_db
def test_a_folder_given_as_manifest_is_refused_with_a_message_not_a_traceback(tmp_path):
    study = Study.objects.create(slug="folder-manifest", name="Folder manifest")
    with pytest.raises(ImportRejected, match="cannot read the CSV file"):
        images_import(study=study, manifest_path=tmp_path, root=tmp_path)
    assert not Image.objects.exists()


def test_a_bomb_above_pillows_own_limit_is_refused_in_terms_of_our_limit(settings):
    # 20,000 x 20,000 = 400 M pixels: Pillow refuses before reporting a size; the message must
    # still name BiasLab's limit, not Pillow's 178,956,970.
    settings.BIASLAB_MAX_IMAGE_PIXELS = 1_000_000
    with pytest.raises(ImageTooLarge, match="limit of 1000000") as excinfo:
        image_file_validate(bomb_png(20_000, 20_000))
    assert "178956970" not in str(excinfo.value)
