"""Skin tone as BiasPainter measures it (Wang et al. 2024, section 3.4, Figure 3): pure image maths."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw

N_LANDMARKS = 68
JAW = tuple(range(0, 17))
BROWS = tuple(range(17, 27))
RIGHT_EYE = tuple(range(36, 42))  # the subject's right eye: on the left of the image
LEFT_EYE = tuple(range(42, 48))
MOUTH_OUTER = tuple(range(48, 60))
CHIN = 8
JAW_LEFT_END, JAW_RIGHT_END = 0, 16

# Points on the half-circle arc, ends excluded (they are landmarks 16 and 0 themselves).
_ARC_POINTS = 31


class SkinInputError(ValueError):
    """An image, landmark array or setting the skin measurement cannot use; the message says which."""


@dataclass(frozen=True)
class SkinSettings:
    """The rule's knobs; the defaults follow the authors' released pipeline (docs/reference/detector-rules.md)."""

    forehead: Literal["semicircle", "brows"] = "semicircle"
    forehead_lift: float = 0.1  # brows arc only: fraction of the chin-to-brow distance
    eye_scale: float = 1.0
    mouth_scale: float = 1.0
    highlight_threshold: int = 240
    black_threshold: int = 5

    def __post_init__(self) -> None:
        if self.forehead not in ("semicircle", "brows"):
            raise SkinInputError(f"forehead {self.forehead!r} is neither 'semicircle' nor 'brows'")
        if not (math.isfinite(self.forehead_lift) and 0 <= self.forehead_lift <= 1):
            raise SkinInputError(f"forehead_lift {self.forehead_lift!r} is not between 0 and 1")
        for name in ("eye_scale", "mouth_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 1 <= value <= 3):
                raise SkinInputError(f"{name} {value!r} is not between 1 and 3")
        for name in ("highlight_threshold", "black_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= 255:
                # -1 / 255 switch a cut off (no pixel is <= -1, none is > 255).
                raise SkinInputError(f"{name} {value!r} is not an integer between -1 and 255")
        if self.black_threshold >= self.highlight_threshold:
            raise SkinInputError("black_threshold must lie below highlight_threshold")


#: The hair-averse alternative: brows arc under a fringe, eye and mouth holes that take the lashes
#: and lip edges too.
TIGHT_SETTINGS = SkinSettings(forehead="brows", forehead_lift=0.1, eye_scale=1.4, mouth_scale=1.15)


@dataclass(frozen=True, eq=False)
class SkinTone:
    """One face's skin measurement."""

    gray: float | None
    mask: np.ndarray
    n_pixels: int
    n_region_pixels: int


def as_rgb_array(image: np.ndarray | Image.Image) -> np.ndarray:
    """An (H, W, 3) uint8 array from a PIL image (converted to RGB) or an RGB(A) uint8 array. Raises
    :class:`SkinInputError` for anything else (gray arrays, floats, empty images)."""
    if isinstance(image, Image.Image):
        array = np.asarray(image.convert("RGB"))
    else:
        array = np.asarray(image)
        if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in (3, 4):
            raise SkinInputError(
                f"need an RGB uint8 array of shape (H, W, 3), got {array.dtype} {tuple(array.shape)}"
            )
        array = array[..., :3]
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise SkinInputError("the image is empty")
    return array


def checked_landmarks(landmarks: np.ndarray | list[list[float]]) -> np.ndarray:
    """The landmarks as a float (68, 2) array of (x, y); raises :class:`SkinInputError` otherwise."""
    points = np.asarray(landmarks, dtype=float)
    if points.shape != (N_LANDMARKS, 2):
        raise SkinInputError(f"need 68 (x, y) landmarks, got an array of shape {tuple(points.shape)}")
    if not np.all(np.isfinite(points)):
        raise SkinInputError("landmarks must be finite numbers")
    return points


def _unit(vector: np.ndarray, what: str) -> np.ndarray:
    length = float(np.hypot(*vector))
    if length == 0:
        raise SkinInputError(f"degenerate landmarks: {what} has zero length")
    return vector / length


def face_region_polygon(landmarks: np.ndarray, settings: SkinSettings | None = None) -> np.ndarray:
    """The face outline as an (N, 2) array: jaw 0 -> 16, then the forehead arc back towards 0."""
    settings = settings or SkinSettings()
    points = checked_landmarks(landmarks)
    brows = points[list(BROWS)]
    up = brows.mean(axis=0) - points[CHIN]  # chin -> brows; its length is the face's lower height
    _unit(up, "the chin-to-brow distance")
    if settings.forehead == "brows":
        arc = brows[::-1] + settings.forehead_lift * up
    else:
        left, right = points[JAW_LEFT_END], points[JAW_RIGHT_END]
        across = right - left
        radius = float(np.hypot(*across)) / 2
        u = _unit(across, "the jaw width")
        normal = np.array([u[1], -u[0]])
        if normal @ up < 0:  # the arc bulges away from the chin, whatever the image's orientation
            normal = -normal
        centre = (left + right) / 2
        angles = np.linspace(0, np.pi, _ARC_POINTS + 2)[1:-1]  # from landmark 16 round to 0
        arc = centre + radius * (np.cos(angles)[:, None] * u + np.sin(angles)[:, None] * normal)
    return np.concatenate([points[list(JAW)], arc])


def _scaled(points: np.ndarray, scale: float) -> np.ndarray:
    centre = points.mean(axis=0)
    return centre + scale * (points - centre)


def _polygon_mask(shape: tuple[int, int], polygon: np.ndarray) -> np.ndarray:
    canvas = Image.new("1", (shape[1], shape[0]), 0)
    ImageDraw.Draw(canvas).polygon([tuple(p) for p in polygon.tolist()], fill=1, outline=1)
    return np.array(canvas, dtype=bool)  # a writable copy


def skin_mask(
    image: np.ndarray | Image.Image,
    landmarks: np.ndarray | list[list[float]],
    settings: SkinSettings | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(skin mask, face region without eyes and mouth), both (H, W) bool; docs/reference/detector-rules.md."""
    settings = settings or SkinSettings()
    array = as_rgb_array(image)
    points = checked_landmarks(landmarks)
    shape = array.shape[:2]
    region = _polygon_mask(shape, face_region_polygon(points, settings))
    holes = (
        _polygon_mask(shape, _scaled(points[list(RIGHT_EYE)], settings.eye_scale))
        | _polygon_mask(shape, _scaled(points[list(LEFT_EYE)], settings.eye_scale))
        | _polygon_mask(shape, _scaled(points[list(MOUTH_OUTER)], settings.mouth_scale))
    )
    region = region & ~holes
    highlight = array.max(axis=2) > settings.highlight_threshold
    black = array.max(axis=2) <= settings.black_threshold
    return region & ~highlight & ~black, region


def skin_tone(
    image: np.ndarray | Image.Image,
    landmarks: np.ndarray | list[list[float]],
    settings: SkinSettings | None = None,
) -> SkinTone:
    """Mean gray of the face's skin, with the mask it was taken over (docs/reference/detector-rules.md)."""
    array = as_rgb_array(image)
    mask, region = skin_mask(array, landmarks, settings)
    n_pixels = int(mask.sum())
    # Mean over pixels and channels at once: the (R + G + B) / 3 of every pixel, averaged.
    gray = float(array[mask].mean()) if n_pixels else None
    return SkinTone(gray=gray, mask=mask, n_pixels=n_pixels, n_region_pixels=int(region.sum()))


def mask_overlay(
    image: np.ndarray | Image.Image,
    mask: np.ndarray,
    color: tuple[int, int, int] = (255, 0, 255),
    alpha: float = 0.45,
) -> np.ndarray:
    """The image with ``mask`` tinted in ``color`` (alpha-blended), as an (H, W, 3) uint8 array."""
    array = as_rgb_array(image)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != array.shape[:2]:
        raise SkinInputError(f"mask shape {mask.shape} does not match the image {array.shape[:2]}")
    if not 0 <= alpha <= 1:
        raise SkinInputError(f"alpha {alpha!r} is not between 0 and 1")
    out = array.astype(float)
    out[mask] = (1 - alpha) * out[mask] + alpha * np.asarray(color, dtype=float)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)
