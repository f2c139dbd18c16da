"""Person boxes from an ultralytics YOLO model (YOLOv8 in the paper's CLIP-Enhance, section 5.1)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors.base import DetectorUnavailable
from detectors.weights import resolve_weights, weights_env_var

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

WEIGHTS_KEY = "yolo"
PERSON_CLASS = 0  # COCO's "person", the class YOLOv8's published checkpoints use
FONT_NAMES = ("Arial.ttf", "Arial.Unicode.ttf")
WEIGHTS_WHAT = (
    "a YOLOv8 checkpoint file, e.g. yolov8n.pt from https://github.com/ultralytics/assets/releases "
    "(the paper's CLIP-Enhance used YOLOv8)"
)


@dataclass(frozen=True)
class PersonBox:
    """A person's box in pixel coordinates of the image (float, as YOLO returns them)."""

    left: float
    top: float
    right: float
    bottom: float
    confidence: float

    @property
    def area(self) -> float:
        return max(0.0, self.right - self.left) * max(0.0, self.bottom - self.top)

    def crop_box(self, width: int, height: int) -> tuple[int, int, int, int]:
        """Integer (left, top, right, bottom) inside a ``width`` x ``height`` image."""
        left = min(max(0, int(self.left)), width - 1)
        top = min(max(0, int(self.top)), height - 1)
        right = max(left + 1, min(width, round(self.right)))
        bottom = max(top + 1, min(height, round(self.bottom)))
        return (left, top, right, bottom)


def prepare_ultralytics_env() -> Path:
    """Set ultralytics' offline switches and a config dir with fonts; return the config dir."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_AUTOINSTALL", "0")
    os.environ.setdefault("ULTRALYTICS_SAFE_LOAD", "1")
    config = Path(
        os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "biaslab-ultralytics"))
    ).expanduser()
    fonts = config / "Ultralytics"  # ultralytics appends this sub-folder to YOLO_CONFIG_DIR
    fonts.mkdir(parents=True, exist_ok=True)
    missing = [name for name in FONT_NAMES if not (fonts / name).is_file()]
    if missing:
        source = _any_ttf_font()
        for name in missing:
            if source is not None:
                shutil.copyfile(source, fonts / name)
    return config


def _any_ttf_font() -> Path | None:
    try:
        import matplotlib

        font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
        return font if font.is_file() else None
    except ImportError:
        return None


class PersonDetector:
    """YOLO person boxes for a batch of images, largest first."""

    def __init__(self, *, device: str = "cpu", confidence: float = 0.25, image_size: int = 640) -> None:
        self.device = device
        self.confidence = confidence
        self.image_size = image_size
        self.weights = ""
        self._model: Any = None

    def load(self) -> None:
        var = weights_env_var(WEIGHTS_KEY)
        self.weights = resolve_weights(WEIGHTS_KEY, config_names=(), what=WEIGHTS_WHAT)
        if not Path(self.weights).is_file():
            raise DetectorUnavailable(f"{var} must name a YOLO checkpoint file (.pt), got {self.weights!r}.")
        prepare_ultralytics_env()
        from detectors.torch_compat import ensure_torchvision

        ensure_torchvision()
        from detectors.safe_load import load_yolo

        # Restricted unpickling: a .pt file is a pickle and must not run code (safe_load.py).
        self._model = load_yolo(self.weights, var=var)

    def detect(self, images: Sequence[PILImage]) -> list[list[PersonBox]]:
        """Person boxes per image (one list per input, in order), largest first."""
        if self._model is None:
            raise RuntimeError("PersonDetector.load() must run before detect()")
        if not images:
            return []
        results = self.results([image.convert("RGB") for image in images], classes=[PERSON_CLASS])
        return [_person_boxes(result) for result in results]

    def results(self, images: Sequence[PILImage], **options: Any) -> list[Any]:
        """ultralytics ``Results`` for RGB ``images``, one each, in order (``options``: predict's others)."""
        return self._model.predict(
            list(images),
            conf=self.confidence,
            imgsz=self.image_size,
            device=self.device,
            quantize=16 if str(self.device).startswith("cuda") else None,  # fp16 on GPU only
            verbose=False,
            **options,
        )


def _person_boxes(result: Any) -> list[PersonBox]:
    boxes = result.boxes
    rows = boxes.xyxy.float().cpu().tolist()
    scores = boxes.conf.float().cpu().tolist()
    classes = boxes.cls.int().cpu().tolist()
    people = [
        PersonBox(left, top, right, bottom, confidence=score)
        for (left, top, right, bottom), score, cls in zip(rows, scores, classes, strict=True)
        if cls == PERSON_CLASS
    ]
    return sorted(people, key=lambda box: box.area, reverse=True)
