"""Images read upright and as 8-bit RGB, at one place, for every consumer."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import ExifTags
from PIL import Image as PILImage

from studies.imaging import browser_file, needs_normalising, normalise, open_rgb, rendition_name

RED, BLUE, WHITE = (255, 0, 0), (0, 0, 255), (255, 255, 255)


def encoded(img: PILImage.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def landscape_red_left_blue_right() -> PILImage.Image:
    """40 wide, 20 high: the left half red, the right half blue."""
    img = PILImage.new("RGB", (40, 20), BLUE)
    img.paste(RED, (0, 0, 20, 20))
    return img


def exif_jpeg(orientation: int) -> bytes:
    exif = PILImage.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    return encoded(landscape_red_left_blue_right(), "JPEG", exif=exif, quality=95)


def sixteen_bit_gradient() -> tuple[np.ndarray, bytes]:
    """A 16-bit grey PNG whose 256 columns span 0..65535 evenly (4 rows)."""
    samples = np.tile(np.linspace(0, 65535, 256).round().astype(np.uint16), (4, 1))
    return samples, encoded(PILImage.fromarray(samples), "PNG")


def close(pixel, expected, tolerance: int = 6) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, expected, strict=True))


# --- orientation -----------------------------------------------------------------------------------


def test_exif_orientation_6_is_turned_clockwise_into_a_portrait():
    img = open_rgb(io.BytesIO(exif_jpeg(6)))
    assert img.size == (20, 40)
    assert close(img.getpixel((10, 5)), RED)  # the stored left edge is now on top
    assert close(img.getpixel((10, 35)), BLUE)


def test_exif_orientation_8_is_turned_counter_clockwise_into_a_portrait():
    img = open_rgb(io.BytesIO(exif_jpeg(8)))
    assert img.size == (20, 40)
    assert close(img.getpixel((10, 5)), BLUE)
    assert close(img.getpixel((10, 35)), RED)


def test_a_jpeg_without_orientation_is_read_as_stored_and_needs_no_rendition():
    data = encoded(landscape_red_left_blue_right(), "JPEG", quality=95)
    img = open_rgb(io.BytesIO(data))
    assert img.size == (40, 20)
    assert close(img.getpixel((5, 10)), RED)
    with PILImage.open(io.BytesIO(data)) as raw:
        assert not needs_normalising(raw)
    with PILImage.open(io.BytesIO(exif_jpeg(6))) as raw:
        assert needs_normalising(raw)


# --- 16-bit ------------------------------------------------------------------------------------------


def test_a_16_bit_grey_png_is_scaled_to_8_bits_not_clipped_to_white():
    samples, data = sixteen_bit_gradient()
    with PILImage.open(io.BytesIO(data)) as raw:
        assert raw.mode == "I;16"
        assert needs_normalising(raw)
    img = open_rgb(io.BytesIO(data))
    assert img.mode == "RGB"
    grey = np.asarray(img)[..., 0]
    assert np.array_equal(grey, np.round(samples / 257).astype(np.uint8))
    assert (grey[0, 0], grey[0, 128], grey[0, 255]) == (0, 128, 255)
    assert np.all(np.diff(grey[0].astype(int)) >= 0)  # a gradient, not a cliff at 255
    assert (np.asarray(img)[..., 0] == np.asarray(img)[..., 2]).all()


@pytest.mark.parametrize("mode", ["I;16B", "I;16L", "I"])
def test_other_16_bit_layouts_scale_the_same_way(mode):
    samples = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    if mode == "I":
        img = PILImage.fromarray(samples.astype(np.int32), mode="I")
    else:
        img = PILImage.frombytes(
            mode, (4, 1), samples.astype(">u2" if mode.endswith("B") else "<u2").tobytes()
        )
    assert needs_normalising(img)
    assert [normalise(img).getpixel((x, 0)) for x in range(4)] == [(0, 0, 0), (1, 1, 1), (128,) * 3, WHITE]


# --- alpha and palettes -----------------------------------------------------------------------------


def test_a_palette_png_with_a_transparent_colour_shows_white_where_transparent():
    img = PILImage.new("P", (4, 4), 0)
    img.putpalette([0, 0, 0, *RED] + [0] * 762)  # index 0 black (transparent), 1 red
    img.putpixel((0, 0), 1)
    data = encoded(img, "PNG", transparency=0)
    with PILImage.open(io.BytesIO(data)) as raw:
        assert raw.mode == "P"
        assert needs_normalising(raw)
    out = open_rgb(io.BytesIO(data))
    assert out.getpixel((0, 0)) == RED
    assert out.getpixel((2, 2)) == WHITE  # not the black behind the transparency


def test_a_palette_png_without_transparency_is_plain_rgb_and_needs_no_rendition():
    img = PILImage.new("P", (2, 2), 1)
    img.putpalette([0, 0, 0, *BLUE] + [0] * 762)
    data = encoded(img, "PNG")
    with PILImage.open(io.BytesIO(data)) as raw:
        assert not needs_normalising(raw)
    assert open_rgb(io.BytesIO(data)).getpixel((1, 1)) == BLUE


def test_rgba_is_composited_on_white():
    img = PILImage.new("RGBA", (3, 1), (0, 0, 0, 0))
    img.putpixel((1, 0), (255, 0, 0, 255))
    img.putpixel((2, 0), (255, 0, 0, 128))
    data = encoded(img, "PNG")
    with PILImage.open(io.BytesIO(data)) as raw:
        assert needs_normalising(raw)
    out = open_rgb(io.BytesIO(data))
    assert out.getpixel((0, 0)) == WHITE  # fully transparent black → the white page
    assert out.getpixel((1, 0)) == RED
    assert close(out.getpixel((2, 0)), (255, 127, 127), tolerance=1)


@pytest.mark.parametrize("mode", ["LA", "PA"])
def test_grey_and_palette_alpha_are_composited_on_white(mode):
    if mode == "LA":
        img = PILImage.new("LA", (2, 1), (0, 0))
        img.putpixel((1, 0), (0, 255))
    else:
        img = PILImage.new("PA", (2, 1), (1, 0))
        img.putpalette([0, 0, 0, *BLUE] + [0] * 762)
        img.putpixel((1, 0), (1, 255))
    out = normalise(img)
    assert out.getpixel((0, 0)) == WHITE
    assert out.getpixel((1, 0)) == ((0, 0, 0) if mode == "LA" else BLUE)


# --- other colour spaces --------------------------------------------------------------------------


def test_a_cmyk_jpeg_becomes_rgb():
    data = encoded(PILImage.new("CMYK", (8, 8), (255, 0, 0, 0)), "JPEG", quality=95)
    with PILImage.open(io.BytesIO(data)) as raw:
        assert raw.mode == "CMYK"
        assert needs_normalising(raw)
    out = open_rgb(io.BytesIO(data))
    assert out.mode == "RGB"
    assert close(out.getpixel((4, 4)), (0, 255, 255))  # pure cyan


@pytest.mark.parametrize(("mode", "value", "expected"), [("L", 77, (77,) * 3), ("1", 1, WHITE)])
def test_grey_and_bilevel_become_rgb_and_need_no_rendition(mode, value, expected):
    img = PILImage.new(mode, (2, 2), value)
    assert not needs_normalising(img)
    assert normalise(img).getpixel((0, 0)) == expected


def test_open_rgb_reads_paths_and_detaches_from_the_file(tmp_path):
    path = tmp_path / "x.jpg"
    path.write_bytes(exif_jpeg(6))
    img = open_rgb(path)
    path.unlink()
    assert img.size == (20, 40)
    assert img.getexif().get(ExifTags.Base.Orientation) is None


# --- renditions for the browser ---------------------------------------------------------------------


def stored(media_root: Path, data: bytes, ext: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    name = f"images/{digest[:2]}/{digest}.{ext}"
    (media_root / name).parent.mkdir(parents=True, exist_ok=True)
    (media_root / name).write_bytes(data)
    return name


def test_a_file_that_needs_normalising_gets_a_png_rendition_once_beside_it(tmp_path):
    _, data = sixteen_bit_gradient()
    name = stored(tmp_path, data, "png")
    served = browser_file(tmp_path, name)
    assert served == rendition_name(name) == name[: -len(".png")] + ".normalised.png"
    assert Path(served).parent == Path(name).parent
    rendition = tmp_path / served
    with PILImage.open(rendition) as img:
        assert img.format == "PNG"
        assert img.mode == "RGB"
        assert np.array_equal(np.asarray(img), np.asarray(open_rgb(tmp_path / name)))
    first = rendition.stat().st_mtime_ns
    assert browser_file(tmp_path, name) == served
    assert rendition.stat().st_mtime_ns == first  # derived once, then reused


def test_a_plain_rgb_file_is_served_as_it_is(tmp_path):
    name = stored(tmp_path, encoded(landscape_red_left_blue_right(), "PNG"), "png")
    assert browser_file(tmp_path, name) == name
    assert not (tmp_path / rendition_name(name)).exists()


@pytest.mark.parametrize(
    "name",
    ["images/x.png", "../outside/" + "a" * 64 + ".jpg", "images/aa/" + "a" * 64 + ".jpg", "renditions/x"],
)
def test_other_names_missing_and_unreadable_files_are_left_to_the_caller(tmp_path, name):
    assert browser_file(tmp_path, name) == name  # missing, or not a stored original's name
    broken = stored(tmp_path, b"not an image at all", "jpg")
    assert browser_file(tmp_path, broken) == broken
