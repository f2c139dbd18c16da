"""Every reader of a study's image files sees the same 8-bit RGB pixels, upright (``open_rgb``);
the media view serves a file that ``needs_normalising`` as a PNG rendition. Rules and why:
docs/explanation/images.md."""

from __future__ import annotations

import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import IO

import numpy as np
from PIL import ExifTags, ImageOps
from PIL import Image as PILImage

from studies.csvio import atomic_file

#: EXIF orientations that move pixels (1 is "as stored").
TRANSPOSING_ORIENTATIONS = frozenset(range(2, 9))
#: Integer modes read as 16-bit samples 0..65535.
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I"})
#: Modes with an alpha channel (premultiplied ones included).
ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
#: Modes a browser shows exactly as ``open_rgb`` does, when there is no transparency colour.
BROWSER_SAME_MODES = frozenset({"RGB", "L", "1", "P"})
#: Background that transparent pixels are composited on (the labeling screen's page colour).
BACKGROUND = (255, 255, 255)

RENDITION_SUFFIX = ".normalised.png"
_STORED_NAME_RE = re.compile(r"images/[0-9a-f]{2}/[0-9a-f]{64}\.[A-Za-z0-9]{1,5}")

Source = str | os.PathLike[str] | IO[bytes]


def exif_orientation(img: PILImage.Image) -> int:
    """The image's EXIF orientation (1..8); 1 when it has none or it cannot be read."""
    try:
        value = img.getexif().get(ExifTags.Base.Orientation, 1)
        return int(value) if int(value) in range(1, 9) else 1
    except Exception:  # a damaged EXIF block must not make the image unreadable
        return 1


def needs_normalising(img: PILImage.Image) -> bool:
    """True when a browser would not show the pixels ``open_rgb`` gives (EXIF rotation, 16-bit
    or float range, transparency, CMYK…)."""
    if img.mode not in BROWSER_SAME_MODES or "transparency" in img.info:
        return True
    return exif_orientation(img) in TRANSPOSING_ORIENTATIONS


def _sixteen_bit_to_l(img: PILImage.Image) -> PILImage.Image:
    samples = np.asarray(img).astype(np.int64)
    scaled = (np.clip(samples, 0, 65535) + 128) // 257  # round(v * 255 / 65535)
    return PILImage.fromarray(scaled.astype(np.uint8), mode="L")


def _on_white(img: PILImage.Image) -> PILImage.Image:
    rgba = img.convert("RGBA")  # also unpremultiplies RGBa / La and applies a transparency colour
    background = PILImage.new("RGBA", rgba.size, (*BACKGROUND, 255))
    return PILImage.alpha_composite(background, rgba).convert("RGB")


def to_rgb8(img: PILImage.Image) -> PILImage.Image:
    """``img`` (loaded, already upright) as a new 8-bit RGB image."""
    mode = img.mode
    if mode in SIXTEEN_BIT_MODES:
        return _sixteen_bit_to_l(img).convert("RGB")
    if mode == "F":
        return img.convert("L").convert("RGB")
    if mode in ALPHA_MODES or (mode in ("P", "L", "RGB", "1") and "transparency" in img.info):
        return _on_white(img)
    if mode == "RGB":
        return img.copy()
    return img.convert("RGB")


def normalise(img: PILImage.Image) -> PILImage.Image:
    """``img`` upright and as 8-bit RGB (EXIF orientation applied first). Always a new image."""
    img.load()
    if exif_orientation(img) in TRANSPOSING_ORIENTATIONS:
        upright = ImageOps.exif_transpose(img)
        # exif_transpose keeps mode and info; the transparency colour still applies.
        return to_rgb8(upright)
    return to_rgb8(img)


def open_rgb(source: Source) -> PILImage.Image:
    """Open an image file (path or binary file object) as upright 8-bit RGB, fully decoded; raises
    what Pillow raises for a missing, unknown or corrupt file."""
    with PILImage.open(source) as img:
        return normalise(img)


def rendition_name(storage_name: str) -> str:
    """Where the browser rendition of a stored original lives, beside it under MEDIA_ROOT."""
    return storage_name.rsplit(".", 1)[0] + RENDITION_SUFFIX


@lru_cache(maxsize=65536)
def _file_needs_normalising(path: str, mtime_ns: int, size: int) -> bool:
    # Keyed by mtime and size too: a test or an operator may put other bytes under the same name.
    try:
        with PILImage.open(path) as img:
            return needs_normalising(img)
    except Exception:  # not an image Pillow can read: the browser gets the file as it is
        return False


_write_lock = threading.Lock()


def _rendition_write(original: Path, target: Path) -> None:
    image = open_rgb(original)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(target, "wb", prefix=".rendition-", suffix=".png") as fh:
        image.save(fh, format="PNG")


def browser_file(media_root: str | os.PathLike[str], storage_name: str) -> str:
    """The storage name to send to a browser for the stored original ``storage_name``: itself, or
    its PNG rendition written on first use; other names are returned unchanged."""
    if not _STORED_NAME_RE.fullmatch(storage_name):
        return storage_name
    root = Path(media_root)
    original = root / storage_name
    rendition = rendition_name(storage_name)
    if (root / rendition).is_file():
        return rendition
    try:
        stat = original.stat()
    except OSError:
        return storage_name
    if not _file_needs_normalising(str(original), stat.st_mtime_ns, stat.st_size):
        return storage_name
    try:
        with _write_lock:  # one thread of this process derives it; others wait, then reuse
            if not (root / rendition).is_file():
                _rendition_write(original, root / rendition)
    except Exception:  # undecodable after all: the browser gets the original as it is
        return storage_name
    return rendition
