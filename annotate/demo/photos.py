"""Real photographs shipped inside installed packages (scikit-image, matplotlib) and deterministic
variants of them: the demo studies' material."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from PIL import ImageEnhance, ImageFilter, ImageOps

SIDE = 512


@functools.cache
def skimage_array(name: str) -> np.ndarray:
    from skimage import data

    return getattr(data, name)()


def skimage_photo(name: str) -> PILImage.Image:
    # Read once per process; every image is built from a fresh PIL copy.
    return PILImage.fromarray(skimage_array(name)).convert("RGB")


def _grace_hopper() -> PILImage.Image:
    from matplotlib import cbook

    # The path, not the file object: for a .npy name the same call returns an array instead.
    return PILImage.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")


def lfw_face(index: int) -> PILImage.Image:
    """An LFW face crop (25x25 px, grey) enlarged, with a margin of its own mean tone: face
    detectors miss faces that touch the border of the image."""
    faces = skimage_array("lfw_subset")  # 100 face crops of 25x25 px (then 100 non-faces)
    array = (np.clip(faces[index], 0.0, 1.0) * 255).astype(np.uint8)
    face = PILImage.fromarray(array).convert("RGB").resize((224, 224), PILImage.Resampling.LANCZOS)
    return ImageOps.expand(face, border=48, fill=(int(array.mean()),) * 3)


# Faces of skimage.data.lfw_subset() by the gender they present (looked at one by one).
LFW_MEN = (1, 3, 15, 23, 41, 49, 63, 80)
LFW_WOMEN = (18, 31, 46, 52, 53, 91, 93, 94, 99)


def fit(image: PILImage.Image, side: int = SIDE) -> PILImage.Image:
    image = image.copy()
    image.thumbnail((side, side), PILImage.Resampling.LANCZOS)
    return image


@dataclass(frozen=True)
class Look:
    """A deterministic change of a photo: what part is kept, mirrored, its colour and light."""

    crop: float = 1.0  # share of each side kept
    dx: float = 0.0  # where the kept part sits, -1 (left/top) … 1 (right/bottom)
    dy: float = 0.0
    flip: bool = False
    colour: float = 1.0  # saturation
    light: float = 1.0  # brightness
    warm: float = 0.0  # > 0 warmer (more red), < 0 cooler (more blue)

    def apply(self, image: PILImage.Image) -> PILImage.Image:
        width, height = image.size
        w, h = round(width * self.crop), round(height * self.crop)
        left = round((width - w) * (1 + self.dx) / 2)
        top = round((height - h) * (1 + self.dy) / 2)
        image = image.crop((left, top, left + w, top + h))
        if self.flip:
            image = ImageOps.mirror(image)
        if self.colour != 1.0:
            image = ImageEnhance.Color(image).enhance(self.colour)
        if self.light != 1.0:
            image = ImageEnhance.Brightness(image).enhance(self.light)
        if self.warm:
            r, g, b = image.split()
            r = r.point(lambda v: min(255, round(v * (1 + self.warm))))
            b = b.point(lambda v: min(255, round(v * (1 - self.warm))))
            image = PILImage.merge("RGB", (r, g, b))
        return fit(image)

    def of(self, photo: str) -> PILImage.Image:
        """This look of the photo named ``photo`` (``PHOTOS``)."""
        return self.apply(PHOTOS[photo].load())

    def describe(self) -> str:
        parts = []
        if self.crop != 1.0:
            parts.append(f"cropped to {round(self.crop * 100)} %")
        if self.flip:
            parts.append("mirrored")
        if self.colour != 1.0:
            parts.append("less saturated" if self.colour < 1 else "more saturated")
        if self.light != 1.0:
            parts.append("darker" if self.light < 1 else "brighter")
        if self.warm:
            parts.append("warmer" if self.warm > 0 else "cooler")
        return ", ".join(parts) or "unchanged"


LOOKS = (
    Look(),
    Look(crop=0.8, dx=0.2, dy=-0.3, flip=True),
    Look(crop=0.9, colour=0.6, light=1.1, warm=0.08),
    Look(crop=0.75, dx=-0.2, dy=-0.4, colour=1.3, light=0.9, warm=-0.06),
    Look(crop=0.85, dx=0.3, flip=True, colour=0.8, warm=0.05),
)


@dataclass(frozen=True)
class Photo:
    """A source photograph: how to load it, and what it shows and comes from."""

    load: Callable[[], PILImage.Image]
    source: str


_SKIMAGE = {
    "astronaut": "skimage.data.astronaut (Eileen Collins)",
    "camera": "skimage.data.camera (a man behind a camera)",
    "coffee": "skimage.data.coffee (no person)",
    "chelsea": "skimage.data.chelsea (a cat, no person)",
}
PHOTOS = {
    **{name: Photo(functools.partial(skimage_photo, name), source) for name, source in _SKIMAGE.items()},
    "hopper": Photo(_grace_hopper, "matplotlib sample grace_hopper.jpg (Grace Hopper)"),
    **{
        f"lfw{n}": Photo(functools.partial(lfw_face, n), f"skimage.data.lfw_subset face {n}")
        for n in LFW_MEN + LFW_WOMEN
    },
}


def side_by_side(left: PILImage.Image, right: PILImage.Image) -> PILImage.Image:
    height = SIDE // 2 + SIDE // 4
    parts = [
        p.resize((round(p.width * height / p.height), height), PILImage.Resampling.LANCZOS)
        for p in (left, right)
    ]
    canvas = PILImage.new("RGB", (sum(p.width for p in parts), height), (255, 255, 255))
    canvas.paste(parts[0], (0, 0))
    canvas.paste(parts[1], (parts[0].width, 0))
    return fit(canvas)


def blurred(image: PILImage.Image) -> PILImage.Image:
    return fit(image).filter(ImageFilter.GaussianBlur(radius=24))


def save(image: PILImage.Image, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Same pixels and settings give the same bytes (JPEG or PNG, by the name), so re-runs are duplicates.
    image.save(target, quality=90)
