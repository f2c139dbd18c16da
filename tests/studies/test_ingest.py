"""Image validation, content-hash storage and the manifest importer (issue 2, sections 2 and
"Bad input"; issue 8: items, roles, metadata, one write transaction; issue 9 item 7: bad values)."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import struct
import zlib
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from PIL import Image as PILImage

from studies import ingest
from studies.errors import ImportRejected
from studies.imports import images, manifest_store
from studies.imports.images import (
    CorruptImage,
    EmptyImageFile,
    ImageFormatNotAllowed,
    ImageTooLarge,
    NotAnImage,
    image_file_validate,
    item_image_store,
    prompt_get_or_create,
)
from studies.imports.manifest_rows import DuplicateImage, ImagePathConflict
from studies.ingest import images_import
from studies.models import Image, ImageRole, Item, ItemChange, ItemImage, Prompt, Study
from tests.factories import StudyFactory, png_bytes

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


# --- item_image_store -------------------------------------------------------------------------


@pytest.fixture
def prompt(study):
    return prompt_get_or_create(study=study, category="profession", word="lawyer", text="a lawyer")


def media_files(settings) -> list[str]:
    """Every file under MEDIA_ROOT, relative to it (temporary files included)."""
    root = Path(settings.MEDIA_ROOT)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_prompt_get_or_create_returns_the_same_prompt_twice(study):
    first = prompt_get_or_create(study=study, category="profession", word="nurse", text="a nurse")
    again = prompt_get_or_create(study=study, category="profession", word="nurse", text="a nurse")
    assert first.pk == again.pk
    assert Prompt.objects.filter(study=study).count() == 1


def test_stored_image_lands_under_media_root_by_content_hash(study, prompt, settings):
    item, created = item_image_store(
        study=study, prompt=prompt, data=png_bytes(7), key="a/7.png", t2i_model="sdxl", seed=5
    )
    assert created
    image = item.item_images.get().image
    assert image.file == f"images/{image.sha256[:2]}/{image.sha256}.png"
    assert (Path(settings.MEDIA_ROOT) / image.file).read_bytes() == png_bytes(7)
    assert (image.width, image.height, image.format, item.seed, item.key) == (32, 32, "PNG", 5, "a/7.png")


def test_storing_the_same_key_and_bytes_again_returns_the_existing_item(study, prompt):
    first, _ = item_image_store(study=study, prompt=prompt, data=png_bytes(7), key="a.png", t2i_model="m")
    again, created = item_image_store(
        study=study, prompt=prompt, data=png_bytes(7), key="a.png", t2i_model="m"
    )
    assert not created
    assert again.pk == first.pk
    assert (Image.objects.count(), Item.objects.count()) == (1, 1)


def test_storing_the_same_bytes_under_another_key_is_a_duplicate(study, prompt):
    item_image_store(study=study, prompt=prompt, data=png_bytes(7), key="a.png", t2i_model="m")
    with pytest.raises(DuplicateImage, match=r"same image content as a\.png"):
        item_image_store(study=study, prompt=prompt, data=png_bytes(7), key="b.png", t2i_model="m")
    assert (Image.objects.count(), Item.objects.count()) == (1, 1)


def test_storing_other_bytes_under_an_imported_key_is_a_conflict(study, prompt):
    item_image_store(study=study, prompt=prompt, data=png_bytes(7), key="a.png", t2i_model="m")
    with pytest.raises(ImagePathConflict, match="different content"):
        item_image_store(study=study, prompt=prompt, data=png_bytes(8), key="a.png", t2i_model="m")


def test_storing_a_corrupt_image_writes_no_row_and_no_file(study, prompt, settings):
    with pytest.raises(NotAnImage):
        item_image_store(study=study, prompt=prompt, data=b"nope" * 50, key="x.png", t2i_model="m")
    assert (Image.objects.count(), Item.objects.count()) == (0, 0)
    assert media_files(settings) == []


def test_an_edit_stored_with_its_seed_photo_is_one_pair_item_sharing_the_seed_file(db):
    pairs = StudyFactory(protocol="pair_change")
    seed, _ = item_image_store(study=pairs, data=png_bytes(1), key="seed-a", role=ImageRole.INPUT)
    seed_image = seed.item_images.get().image
    edit, created = item_image_store(
        study=pairs,
        data=png_bytes(2),
        key="pair-1",
        source_path="edits/1.png",
        role=ImageRole.OUTPUT,
        extra_images={ImageRole.INPUT: seed_image},
    )
    assert created
    roles = {link.role: link.image for link in edit.item_images.all()}
    assert roles[ImageRole.INPUT] == seed_image
    assert edit.item_images.get(role=ImageRole.OUTPUT).source_path == "edits/1.png"
    assert Image.objects.count() == 2


# --- images_import ------------------------------------------------------------------------------


def item_paths(study: Study) -> list[str]:
    return list(
        ItemImage.objects.filter(item__study=study).order_by("id").values_list("source_path", flat=True)
    )


def test_a_manifest_imports_every_row_as_a_one_image_item_with_its_prompt(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert (summary.accepted, summary.duplicates, summary.rejected) == (3, 0, [])
    item = Item.objects.get(key="sdxl/1.png")
    assert (item.t2i_model, item.seed, item.index, item.params, item.metadata) == (
        "sdxl",
        101,
        1,
        {"steps": 30},
        {},
    )
    assert item.prompt.word == "lawyer"
    link = item.item_images.get()
    assert (link.role, link.source_path) == (ImageRole.IMAGE, "sdxl/1.png")
    assert Prompt.objects.filter(study=study).count() == 1


def test_running_the_same_import_twice_changes_nothing(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    images_import(study=study, manifest_path=manifest, root=root)
    before = list(
        ItemImage.objects.values_list("id", "item_id", "source_path", "image__sha256", "image__file")
    )
    again = images_import(study=study, manifest_path=manifest, root=root)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 3, [])
    assert (
        list(ItemImage.objects.values_list("id", "item_id", "source_path", "image__sha256", "image__file"))
        == before
    )


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
    assert item_paths(study) == ["sdxl/0.png"]


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
    assert item_paths(study) == ["sdxl/0.png", "sdxl/1.png"]


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
    assert (Image.objects.count(), Item.objects.count(), Prompt.objects.count()) == (0, 0, 0)


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


def test_the_same_file_in_two_studies_is_one_image_row_and_one_file(study, root, tmp_path, settings):
    other = StudyFactory(name="Other", slug="other")
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    images_import(study=study, manifest_path=manifest, root=root)
    assert images_import(study=other, manifest_path=manifest, root=root).accepted == 1
    assert (Item.objects.count(), Image.objects.count()) == (2, 1)
    assert len(media_files(settings)) == 1


def test_progress_is_reported_once_after_the_write(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    seen: list[tuple[int, int, int]] = []

    def progress(summary, done):
        seen.append((done, summary.accepted, Item.objects.filter(study=study).count()))

    images_import(study=study, manifest_path=manifest, root=root, progress=progress)
    assert seen == [(3, 3, 3)]


def test_a_manifest_with_a_byte_order_mark_is_read(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    manifest.write_bytes(b"\xef\xbb\xbf" + manifest.read_bytes())
    assert images_import(study=study, manifest_path=manifest, root=root).accepted == 1


def test_a_manifest_that_is_not_utf8_is_refused(study, root, tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_bytes(",".join(HEADER).encode() + b"\n\xff\xfe\xfa,x\n")
    with pytest.raises(ImportRejected, match="not UTF-8"):
        images_import(study=study, manifest_path=manifest, root=root)


# --- items, roles, metadata, questions (issue 8) ------------------------------------------------


def test_unknown_columns_are_kept_as_item_metadata(study, root, tmp_path):
    header = [*HEADER, "gender", "setting"]
    manifest = write_manifest(
        tmp_path / "m.csv",
        [row("sdxl/0.png", gender="woman", setting="office"), row("sdxl/1.png", 1, gender="man")],
        header=header,
    )
    assert images_import(study=study, manifest_path=manifest, root=root).accepted == 2
    assert Item.objects.get(key="sdxl/0.png").metadata == {"gender": "woman", "setting": "office"}
    assert Item.objects.get(key="sdxl/1.png").metadata == {"gender": "man"}


def test_an_item_column_names_the_item_instead_of_the_path(study, root, tmp_path):
    manifest = write_manifest(
        tmp_path / "m.csv",
        [row("sdxl/0.png", item="lawyer-0"), row("sdxl/1.png", 1, item="lawyer-1")],
        header=[*HEADER, "item"],
    )
    assert images_import(study=study, manifest_path=manifest, root=root).accepted == 2
    item = Item.objects.get(key="lawyer-0")
    assert item.item_images.get().source_path == "sdxl/0.png"


@pytest.fixture
def pair_study(db):
    return StudyFactory(slug="pairs", protocol="pair_change")


PAIR_HEADER = ["item", "role", "image", "t2i_model", "prompt", "category", "word", "seed", "domain"]


def pair_row(item: str, role: str, path: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {"item": item, "role": role, "image": path}
    if role == "output":
        base.update(
            t2i_model="sd15-edit",
            prompt="make this person a lawyer",
            category="profession",
            word="lawyer",
            seed=7,
            domain="profession",
        )
    base.update(extra)
    return base


def test_rows_sharing_an_item_form_one_pair_whose_seed_photo_is_stored_once(
    pair_study, root, tmp_path, settings
):
    (root / "edit-a.png").write_bytes(png_bytes(30))
    (root / "edit-b.png").write_bytes(png_bytes(31))
    manifest = write_manifest(
        tmp_path / "m.csv",
        [
            pair_row("p1", "input", "sdxl/0.png"),
            pair_row("p1", "output", "edit-a.png"),
            pair_row("p2", "input", "sdxl/0.png"),
            pair_row("p2", "output", "edit-b.png", domain="trait"),
        ],
        header=PAIR_HEADER,
    )
    summary = images_import(study=pair_study, manifest_path=manifest, root=root)
    assert (summary.accepted, summary.rejected) == (4, [])
    p1 = Item.objects.get(study=pair_study, key="p1")
    roles = {link.role: link.source_path for link in p1.item_images.all()}
    assert roles == {"input": "sdxl/0.png", "output": "edit-a.png"}
    assert (p1.t2i_model, p1.seed, p1.prompt.word, p1.metadata) == (
        "sd15-edit",
        7,
        "lawyer",
        {"domain": "profession"},
    )
    assert Item.objects.get(key="p2").metadata == {"domain": "trait"}
    assert Image.objects.count() == 3  # one seed photo, two edits
    assert len(media_files(settings)) == 3
    again = images_import(study=pair_study, manifest_path=manifest, root=root)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 4, [])


def test_a_pair_missing_its_seed_photo_is_refused_whole(pair_study, root, tmp_path):
    (root / "edit-a.png").write_bytes(png_bytes(30))
    manifest = write_manifest(
        tmp_path / "m.csv", [pair_row("p1", "output", "edit-a.png")], header=PAIR_HEADER
    )
    summary = images_import(study=pair_study, manifest_path=manifest, root=root)
    assert summary.accepted == 0
    assert str(summary.rejected[0]) == (
        "row 2 (edit-a.png): pair item p1 has no input image (a pair needs its seed photo and its edit)"
    )
    assert Item.objects.count() == 0


def test_a_bad_value_in_one_row_of_a_pair_refuses_the_whole_pair(pair_study, root, tmp_path, settings):
    (root / "edit-a.png").write_bytes(png_bytes(30))
    (root / "edit-b.png").write_bytes(png_bytes(31))
    manifest = write_manifest(
        tmp_path / "m.csv",
        [
            pair_row("p1", "input", "sdxl/0.png"),
            pair_row("p1", "output", "edit-a.png", seed="NaN"),
            pair_row("p2", "input", "sdxl/1.png"),
            pair_row("p2", "output", "edit-b.png"),
        ],
        header=PAIR_HEADER,
    )
    summary = images_import(study=pair_study, manifest_path=manifest, root=root)
    assert [str(r) for r in summary.rejected] == [
        "row 2 (sdxl/0.png): item p1 has a refused row (row 3): the item is not imported",
        "row 3 (edit-a.png): seed must be an integer, got 'NaN'",
    ]
    assert list(Item.objects.values_list("key", flat=True)) == ["p2"]
    assert len(media_files(settings)) == 2  # p2's files only


@pytest.mark.parametrize(
    ("role", "reason"),
    [("", "empty 'role' value"), ("image", "role 'image' is not a role of a pair_change study")],
)
def test_a_pair_row_needs_the_input_or_output_role(pair_study, root, tmp_path, role, reason):
    manifest = write_manifest(tmp_path / "m.csv", [pair_row("p1", role, "sdxl/0.png")], header=PAIR_HEADER)
    summary = images_import(study=pair_study, manifest_path=manifest, root=root)
    assert summary.rejected[0].reason.startswith(reason)


def test_a_pair_manifest_needs_the_item_and_role_columns(pair_study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    with pytest.raises(ImportRejected, match=r"missing required column\(s\): item, role"):
        images_import(study=pair_study, manifest_path=manifest, root=root)


def test_a_questions_column_limits_the_questions_an_item_asks(db, root, tmp_path):
    attributes = StudyFactory(slug="attrs", protocol="attributes")
    manifest = write_manifest(
        tmp_path / "m.csv",
        [
            row("sdxl/0.png", questions="boots|hat"),
            row("sdxl/1.png", 1),
            row("sdxl/2.png", 2, questions="wings"),
        ],
        header=[*HEADER, "questions"],
    )
    summary = images_import(study=attributes, manifest_path=manifest, root=root)
    assert Item.objects.get(key="sdxl/0.png").question_keys == ["boots", "hat"]
    assert Item.objects.get(key="sdxl/1.png").question_keys == []
    assert [r.row for r in summary.rejected] == [4]
    assert summary.rejected[0].reason.startswith("question 'wings' is not a question of the study")


# --- all good rows in one transaction -------------------------------------------------------------


def test_a_failed_write_leaves_no_row_and_no_orphan_file(study, root, tmp_path, settings, monkeypatch):
    from django.db import DataError

    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])

    real = manifest_store.rows_insert

    def refuse(model, *args, **kwargs):
        if model is ItemImage:  # the last INSERT of the write: items and images are written
            raise DataError("value too long for type character varying(1000)")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(manifest_store, "rows_insert", refuse)
    with pytest.raises(ImportRejected, match=r"the database refused the import .*nothing was written"):
        images_import(study=study, manifest_path=manifest, root=root)
    assert (Item.objects.count(), Image.objects.count(), Prompt.objects.count()) == (0, 0, 0)
    assert media_files(settings) == []


def test_stored_files_get_a_plain_files_mode_and_no_temporary_file_is_left(study, root, tmp_path, settings):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    images_import(study=study, manifest_path=manifest, root=root)
    umask = os.umask(0)
    os.umask(umask)
    stored = [Path(settings.MEDIA_ROOT) / name for name in Image.objects.values_list("file", flat=True)]
    assert len(stored) == 3
    assert {stat.S_IMODE(path.stat().st_mode) for path in stored} == {0o666 & ~umask}
    assert not [p for p in Path(settings.MEDIA_ROOT).rglob(".incoming-*")]


def test_an_interrupted_write_leaves_no_orphan_file(study, root, tmp_path, settings, monkeypatch):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])

    real = manifest_store.rows_insert_returning

    def interrupt(model, *args, **kwargs):
        if model is Item:
            raise KeyboardInterrupt
        return real(model, *args, **kwargs)

    monkeypatch.setattr(manifest_store, "rows_insert_returning", interrupt)
    with pytest.raises(KeyboardInterrupt):
        images_import(study=study, manifest_path=manifest, root=root)
    assert (Item.objects.count(), Image.objects.count()) == (0, 0)
    assert media_files(settings) == []


def test_a_failed_write_keeps_the_files_other_items_already_use(study, root, tmp_path, settings, monkeypatch):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    before = media_files(settings)
    other = StudyFactory(slug="other")
    manifest = write_manifest(tmp_path / "b.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    real = manifest_store.rows_insert

    def fail(model, *args, **kwargs):
        if model is ItemImage:
            raise RuntimeError("boom")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(manifest_store, "rows_insert", fail)
    with pytest.raises(RuntimeError):
        images_import(study=other, manifest_path=manifest, root=root)
    assert media_files(settings) == before
    assert Item.objects.filter(study=other).count() == 0


def test_a_file_that_changes_after_its_check_is_refused_with_its_item(
    study, root, tmp_path, settings, monkeypatch
):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("sdxl/1.png", 1)])
    real_check = ingest._ManifestImport.file_check

    def check_then_change(self, job):
        result = real_check(self, job)
        plan, _ = job
        if plan.path == "sdxl/1.png":
            (root / "sdxl" / "1.png").write_bytes(png_bytes(99))
        return result

    monkeypatch.setattr(ingest._ManifestImport, "file_check", check_then_change)
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert summary.accepted == 1
    assert str(summary.rejected[0]) == (
        "row 3 (sdxl/1.png): the file changed while it was being imported: import it again"
    )
    assert item_paths(study) == ["sdxl/0.png"]
    assert len(media_files(settings)) == 1


# --- one bad value never breaks an import (issue 9, item 7) -------------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"word": "law\x00yer"}, "column 'word' contains a NUL character"),
        ({"gender": "wo\x00man"}, "column 'gender' contains a NUL character"),
        ({"t2i_model": "m" * 201}, "column 't2i_model' is longer than 200 characters"),
        ({"category": "c" * 101}, "column 'category' is longer than 100 characters"),
        ({"word": "w" * 201}, "column 'word' is longer than 200 characters"),
        ({"item": "i" * 1001}, "column 'item' is longer than 1000 characters"),
        ({"params": '{"guidance": NaN}'}, "params holds NaN is not a number JSON allows"),
        ({"params": '{"guidance": Infinity}'}, "params holds Infinity is not a number JSON allows"),
        ({"params": '{"guidance": -Infinity}'}, "params holds -Infinity is not a number JSON allows"),
        ({"index": str(2**31)}, "index must be at most 2147483647, got 2147483648"),
        ({"seed": str(2**63)}, "seed 9223372036854775808 does not fit in 64 bits"),
        ({"seed": "NaN"}, "seed must be an integer, got 'NaN'"),
    ],
    ids=[
        "nul",
        "nul-in-metadata",
        "long-model",
        "long-category",
        "long-word",
        "long-item",
        "nan-params",
        "infinity-params",
        "minus-infinity-params",
        "index-2^31",
        "seed-2^63",
        "nan-seed",
    ],
)
def test_one_bad_value_refuses_only_its_row_by_number_and_reason(
    study, root, tmp_path, settings, extra, reason
):
    header = [*HEADER, "item", "gender"]
    rows = [
        row("sdxl/0.png", item="a"),
        row("sdxl/1.png", 1, **{"item": "b", **extra}),
        row("sdxl/2.png", 2, item="c"),
    ]
    manifest = write_manifest(tmp_path / "m.csv", rows, header=header)
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert [str(r) for r in summary.rejected] == [f"row 3 (sdxl/1.png): {reason}"]
    assert summary.accepted == 2
    assert list(Item.objects.order_by("key").values_list("key", flat=True)) == ["a", "c"]
    assert len(media_files(settings)) == 2


def test_a_nul_byte_in_an_image_path_is_refused_by_row(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("sdxl/\x001.png")])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert [r.row for r in summary.rejected] == [3]
    assert "NUL character" in summary.rejected[0].reason
    assert summary.accepted == 1


def test_an_image_path_longer_than_its_column_is_refused_by_row(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("x/" * 600 + "a.png")])
    summary = images_import(study=study, manifest_path=manifest, root=root)
    assert [r.row for r in summary.rejected] == [3]
    assert summary.rejected[0].reason == "column 'image' is longer than 1000 characters"


def test_invalid_utf8_refuses_the_whole_manifest_naming_the_line(study, root, tmp_path, settings):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("sdxl/1.png", 1)])
    manifest.write_bytes(manifest.read_bytes().replace(b"sdxl/1.png", b"sdxl/\xc3\x281.png"))
    with pytest.raises(ImportRejected, match="not UTF-8 text near line 3"):
        images_import(study=study, manifest_path=manifest, root=root)
    assert Item.objects.count() == 0
    assert media_files(settings) == []


def test_a_field_over_the_csv_size_limit_refuses_the_manifest_naming_the_line(study, root, tmp_path):
    manifest = write_manifest(
        tmp_path / "m.csv", [row("sdxl/0.png"), row("sdxl/1.png", 1, prompt="p" * 200_000)]
    )
    with pytest.raises(ImportRejected, match="not a readable CSV file near line 3"):
        images_import(study=study, manifest_path=manifest, root=root)
    assert Item.objects.count() == 0


def test_a_nul_byte_in_the_header_refuses_the_manifest(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")], header=[*HEADER, "gen\x00der"])
    with pytest.raises(ImportRejected, match="header row contains a NUL character"):
        images_import(study=study, manifest_path=manifest, root=root)


# --- import_images command ---------------------------------------------------------------------


def test_the_command_imports_into_an_existing_study_and_prints_the_summary(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    out = io.StringIO()
    call_command("import_images", manifest=str(manifest), root=str(root), study="gender", stdout=out)
    assert Item.objects.filter(study=study).count() == 3
    assert "accepted: 3 images" in out.getvalue()
    assert "updated: 0 items" in out.getvalue()
    assert "rejected: 0" in out.getvalue()


def test_a_mistyped_study_slug_is_refused_listing_the_studies_and_naming_create_study(
    study, root, tmp_path, settings
):
    # Issue 19: `import_images --study gepp` used to create a new gender study and fill it.
    StudyFactory(slug="gep", protocol="attributes")
    manifest = write_manifest(tmp_path / "m.csv", [row(f"sdxl/{n}.png", n) for n in range(3)])
    with pytest.raises(CommandError) as refused:
        call_command(
            "import_images", manifest=str(manifest), root=str(root), study="gepp", stdout=io.StringIO()
        )
    message = str(refused.value)
    assert "No study with slug 'gepp'" in message
    assert "existing studies: gender, gep" in message
    assert "did you mean 'gep'?" in message
    assert not Study.objects.filter(slug="gepp").exists()
    assert not Item.objects.exists()
    assert media_files(settings) == []


def test_without_any_study_the_import_names_create_study_and_creates_none(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    with pytest.raises(
        CommandError, match=r"There is no study yet: create one with `manage\.py create_study"
    ):
        call_command("import_images", manifest=str(manifest), root=str(root), stdout=io.StringIO())
    assert not Study.objects.exists()


def test_the_command_lists_rejected_rows_and_fails(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png"), row("../x.png")])
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 row\\(s\\) rejected"):
        call_command("import_images", manifest=str(manifest), root=str(root), study="gender", stdout=out)
    assert "row 3 (../x.png): path with '..' refused" in out.getvalue()
    assert Item.objects.filter(study=study).count() == 1


def test_the_command_refuses_a_manifest_missing_a_column(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")], header=["image", "t2i_model"])
    with pytest.raises(CommandError, match="missing required column\\(s\\): prompt, category, word"):
        call_command(
            "import_images", manifest=str(manifest), root=str(root), study="gender", stdout=io.StringIO()
        )
    assert not Item.objects.exists()


def test_the_command_imports_pairs_into_a_pair_change_study(pair_study, root, tmp_path):
    (root / "edit.png").write_bytes(png_bytes(30))
    manifest = write_manifest(
        tmp_path / "m.csv",
        [pair_row("p1", "input", "sdxl/0.png"), pair_row("p1", "output", "edit.png")],
        header=PAIR_HEADER,
    )
    out = io.StringIO()
    call_command("import_images", manifest=str(manifest), root=str(root), study="pairs", stdout=out)
    assert "accepted: 2 images" in out.getvalue()
    assert Item.objects.get(study=pair_study).item_images.count() == 2


def test_format_names_in_settings_are_read_leniently(settings):
    settings.BIASLAB_IMAGE_FORMATS = ["jpg", "png", "NOT-A-FORMAT"]
    assert images.allowed_formats() == ["JPEG", "PNG"]
    assert image_file_validate(png_bytes(1)).format == "PNG"


def test_the_command_refuses_a_study_slug_that_is_not_a_slug(db, root, tmp_path):
    manifest = write_manifest(tmp_path / "m.csv", [row("sdxl/0.png")])
    with pytest.raises(CommandError, match="No study with slug 'my study!'"):
        call_command("import_images", manifest=str(manifest), root=str(root), study="my study!")
    assert not Study.objects.exists()


@pytest.mark.django_db
def test_a_folder_given_as_manifest_is_refused_with_a_message_not_a_traceback(tmp_path):
    study = StudyFactory(slug="folder-manifest", name="Folder manifest")
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


# --- corrections by re-import (issue 19) ------------------------------------------------------

EXTRA_HEADER = [*HEADER, "setting", "gender"]


def test_reimporting_changed_metadata_updates_the_item_and_keeps_an_audit_record(study, root, tmp_path):
    first = [row(f"sdxl/{n}.png", n, setting="office", gender="man") for n in range(3)]
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", first, EXTRA_HEADER), root=root
    )
    fixed = list(first)
    fixed[1] = row(
        "sdxl/1.png",
        1,
        t2i_model="sd15",
        category="trait",
        word="kind",
        prompt="a photo of a kind person",
        params=json.dumps({"steps": 50}),
        setting="street",
        gender="man",
    )
    manifest = write_manifest(tmp_path / "b.csv", fixed, EXTRA_HEADER)
    out = io.StringIO()
    call_command("import_images", manifest=str(manifest), root=str(root), study="gender", stdout=out)
    text = out.getvalue()
    assert "accepted: 0 images" in text
    assert "updated: 1 items" in text
    assert "duplicates (already imported, unchanged): 2" in text
    assert "sdxl/1.png: t2i_model 'sdxl' → 'sd15'" in text
    assert "category 'profession' → 'trait'" in text
    assert "word 'lawyer' → 'kind'" in text
    item = Item.objects.select_related("prompt").get(study=study, key="sdxl/1.png")
    assert item.t2i_model == "sd15"
    assert (item.prompt.category, item.prompt.word, item.prompt.text) == (
        "trait",
        "kind",
        "a photo of a kind person",
    )
    assert item.params == {"steps": 50}
    assert item.metadata == {"setting": "street", "gender": "man"}
    # The other items are as they were.
    assert Item.objects.get(study=study, key="sdxl/0.png").metadata == {"setting": "office", "gender": "man"}
    [change] = ItemChange.objects.all()
    assert (change.item, change.item_key, change.action) == (item, "sdxl/1.png", "updated")
    assert change.actor.startswith("shell user")
    assert "b.csv" in change.source
    assert change.changes["t2i_model"] == {"old": "sdxl", "new": "sd15"}
    assert change.changes["params"] == {"old": {"steps": 30}, "new": {"steps": 50}}
    assert change.changes["metadata"] == {
        "old": {"setting": "office", "gender": "man"},
        "new": {"setting": "street", "gender": "man"},
    }
    # Importing the fixed manifest again changes nothing more.
    again = images_import(study=study, manifest_path=manifest, root=root)
    assert (again.accepted, again.updated, again.duplicates) == (0, [], 3)
    assert ItemChange.objects.count() == 1


def test_a_reimport_names_the_account_that_changed_the_item(study, root, tmp_path, researcher):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    manifest = write_manifest(tmp_path / "b.csv", [row("sdxl/0.png", seed=7)])
    summary = images_import(study=study, manifest_path=manifest, root=root, user=researcher)
    assert [str(update) for update in summary.updated] == ["sdxl/0.png: seed 100 → 7"]
    change = ItemChange.objects.get()
    assert (change.changed_by, change.actor) == (researcher, "rita")


def test_a_metadata_column_the_manifest_lacks_is_kept(study, root, tmp_path):
    images_import(
        study=study,
        manifest_path=write_manifest(
            tmp_path / "a.csv", [row("sdxl/0.png", setting="office")], [*HEADER, "setting"]
        ),
        root=root,
    )
    summary = images_import(
        study=study,
        manifest_path=write_manifest(
            tmp_path / "b.csv", [row("sdxl/0.png")], ["image", "t2i_model", "prompt", "category", "word"]
        ),
        root=root,
    )
    assert (summary.updated, summary.duplicates) == ([], 1)
    item = Item.objects.get(study=study)
    assert (item.metadata, item.params, item.seed) == ({"setting": "office"}, {"steps": 30}, 100)


def test_a_dry_run_prints_what_would_change_and_writes_nothing(study, root, tmp_path, settings):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    files_before = media_files(settings)
    manifest = write_manifest(
        tmp_path / "b.csv", [row("sdxl/0.png", word="judge"), row("sdxl/1.png", 1), row("sdxl/2.png", 2)]
    )
    out = io.StringIO()
    call_command(
        "import_images", manifest=str(manifest), root=str(root), study="gender", dry_run=True, stdout=out
    )
    text = out.getvalue()
    assert "would be accepted: 2 images" in text
    assert "would be updated: 1 items" in text
    assert "sdxl/0.png: word 'lawyer' → 'judge'" in text
    assert "nothing was written" in text
    assert Item.objects.count() == 1
    assert Item.objects.get().prompt.word == "lawyer"
    assert not ItemChange.objects.exists()
    assert media_files(settings) == files_before


def test_a_changed_image_file_for_an_existing_row_is_refused_naming_remove_items(study, root, tmp_path):
    manifest = write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")])
    images_import(study=study, manifest_path=manifest, root=root)
    (root / "sdxl" / "0.png").write_bytes(png_bytes(99))
    summary = images_import(study=study, manifest_path=manifest, root=root)
    [refused] = summary.rejected
    assert "already imported with different content" in refused.reason
    assert "remove_items --study gender --item sdxl/0.png" in refused.reason


def test_the_questions_of_a_labelled_item_cannot_change_by_reimport(study, root, tmp_path):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    Item.objects.filter(study=study).update(completed_seats=1)
    manifest = write_manifest(
        tmp_path / "b.csv", [row("sdxl/0.png", questions="gender")], [*HEADER, "questions"]
    )
    summary = images_import(study=study, manifest_path=manifest, root=root)
    [refused] = summary.rejected
    assert "already has labels: the questions it asks cannot change" in refused.reason
    assert "remove_items" in refused.reason
    assert summary.duplicates == 0
    assert Item.objects.get().question_keys == []


def test_the_audit_trail_is_read_only_in_the_admin(study, root, tmp_path, admin_user, client_for):
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "a.csv", [row("sdxl/0.png")]), root=root
    )
    images_import(
        study=study, manifest_path=write_manifest(tmp_path / "b.csv", [row("sdxl/0.png", seed=1)]), root=root
    )
    change = ItemChange.objects.get()
    client = client_for(admin_user)
    listing = client.get("/admin/studies/itemchange/")
    assert listing.status_code == 200
    assert "sdxl/0.png" in listing.content.decode()
    assert client.get(f"/admin/studies/itemchange/{change.pk}/change/").status_code == 200
    assert client.get("/admin/studies/itemchange/add/").status_code == 403
    assert client.post(f"/admin/studies/itemchange/{change.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ItemChange.objects.filter(pk=change.pk).exists()


def test_a_metadata_fix_that_changes_the_questions_an_attributes_item_asks_applies_them(db, root, tmp_path):
    from studies.services import study_define

    gep = study_define(slug="gep", protocol="attributes").study
    header = [*HEADER, "gender", "setting", "attribute"]
    images_import(
        study=gep,
        manifest_path=write_manifest(
            tmp_path / "a.csv", [row("sdxl/0.png", gender="woman", setting="neutral")], header
        ),
        root=root,
    )
    assert Item.objects.get(study=gep).question_keys == []
    fixed = [row("sdxl/0.png", gender="woman", setting="explicit", attribute="boots")]
    summary = images_import(
        study=gep, manifest_path=write_manifest(tmp_path / "b.csv", fixed, header), root=root
    )
    assert summary.updated[0].changes["questions"] == ([], ["boots"])
    assert Item.objects.get(study=gep).question_keys == ["boots"]
