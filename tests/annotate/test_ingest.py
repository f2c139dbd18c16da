"""Image validation, content-hash storage and the manifest importer (issue 2, sections 2 and "Bad input")."""

from __future__ import annotations

import csv
import io
import json
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image as PILImage

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
    prompt_get_or_create,
)
from annotate.models import Image, Prompt
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
