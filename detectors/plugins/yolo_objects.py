"""``yolo_objects``: every object an ultralytics YOLO finds, for the object co-occurrence study."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from detectors.base import Detector, DetectorOptionError, DetectorOutput, DetectorUnavailable
from detectors.kinds import KIND_OBJECTS
from detectors.plugins.persons import WEIGHTS_KEY, PersonDetector
from detectors.weights import configured_weights, weights_env_var
from metrics.coco_names import UnknownClassName, normalise_class_name

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

DEFAULT_CONFIDENCE = 0.25  # ultralytics' predict default
DEFAULT_IOU = 0.7  # ultralytics' NMS default
DEFAULT_IMAGE_SIZE = 640
DEFAULT_MAX_DET = 300
DEFAULT_BATCH_SIZE = 16


def coco_names_of(names: Mapping[int, str], *, var: str) -> dict[int, str]:
    """A checkpoint's ``{class id: name}`` in ultralytics' COCO spelling."""
    normalised: dict[int, str] = {}
    unknown: list[str] = []
    for class_id, name in names.items():
        try:
            normalised[int(class_id)] = normalise_class_name(str(name))
        except UnknownClassName:
            unknown.append(repr(name))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise DetectorUnavailable(
            f"The YOLO weights in {var} detect classes that are not COCO classes ({shown}); "
            "yolo_objects needs a COCO detector such as yolov8n.pt (a model built from a yaml has "
            "numbered classes only)."
        )
    return normalised


def image_objects(
    boxes: Sequence[Sequence[float]],
    confidences: Sequence[float],
    class_ids: Sequence[int],
    *,
    names: Mapping[int, str],
    width: int,
    height: int,
) -> list[dict[str, Any]]:
    """One image's instances as the ``objects`` kind lists them."""
    found = []
    for box, confidence, class_id in zip(boxes, confidences, class_ids, strict=True):
        x0, y0, x1, y1 = (float(v) for v in box)
        x0, x1 = (round(min(max(v, 0.0), float(width)), 2) for v in (x0, x1))
        y0, y1 = (round(min(max(v, 0.0), float(height)), 2) for v in (y0, y1))
        if x1 <= x0 or y1 <= y0:
            continue
        score = round(min(max(float(confidence), 0.0), 1.0), 6)
        found.append({"class": names[int(class_id)], "confidence": score, "box": [x0, y0, x1, y1]})
    return sorted(found, key=lambda o: (-o["confidence"], o["class"], o["box"]))


class _AllClassesYolo(PersonDetector):
    """``PersonDetector``'s loading (weights setting, offline switches, its way of opening the
    file) with predictions of every class instead of persons only."""

    def __init__(self, *, device: str, confidence: float, iou: float, image_size: int, max_det: int) -> None:
        super().__init__(device=device, confidence=confidence, image_size=image_size)
        self.iou = iou
        self.max_det = max_det

    @property
    def names(self) -> Mapping[int, str]:
        return self._model.names

    def results(self, images: Sequence[PILImage], **options: Any) -> list[Any]:
        # Always the square letterbox (rect=False): ultralytics' default pads a batch of equal
        # shapes less than a mixed one, so an image's output would depend on its batch.
        return super().results(images, iou=self.iou, max_det=self.max_det, rect=False, **options)


class YoloObjectsDetector(Detector):
    key = "yolo_objects"
    output_kind = KIND_OBJECTS
    version = "1"
    description = "ultralytics YOLO: every COCO object instance with its class, confidence and box"
    option_help = {
        "confidence": f"lowest confidence kept, 0-1 (default {DEFAULT_CONFIDENCE}, ultralytics' own)",
        "iou": f"NMS IoU above which the weaker box of a class is dropped, 0-1 (default {DEFAULT_IOU})",
        "image_size": f"inference size in pixels (default {DEFAULT_IMAGE_SIZE})",
        "max_det": f"most instances kept per image (default {DEFAULT_MAX_DET})",
        "batch_size": f"images per forward pass (default {DEFAULT_BATCH_SIZE}); speed only",
    }

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        confidence = self._fraction("confidence", options.get("confidence", DEFAULT_CONFIDENCE))
        iou = self._fraction("iou", options.get("iou", DEFAULT_IOU))
        image_size = self.number_option(
            "image_size", options.get("image_size", DEFAULT_IMAGE_SIZE), int, minimum=32
        )
        max_det = self.number_option("max_det", options.get("max_det", DEFAULT_MAX_DET), int, minimum=1)
        self.batch_size = self.number_option(
            "batch_size", options.get("batch_size", DEFAULT_BATCH_SIZE), int, minimum=1
        )
        self.yolo = _AllClassesYolo(
            device=device, confidence=confidence, iou=iou, image_size=image_size, max_det=max_det
        )
        self.class_names: dict[int, str] = {}

    @classmethod
    def _fraction(cls, name: str, value: Any) -> float:
        number = cls.number_option(name, value, float, minimum=0)
        if number > 1:
            raise DetectorOptionError(f"{cls.key}'s option {name} must be between 0 and 1, got {value!r}.")
        return number

    @property
    def version_id(self) -> str:
        # The weights as configured (not as resolved), so the id is known before load().
        yolo = self.yolo
        return (
            f"{self.version}+{configured_weights(WEIGHTS_KEY)}+c{yolo.confidence:g}+iou{yolo.iou:g}"
            f"+s{yolo.image_size}+m{yolo.max_det}"
        )

    def load(self) -> None:
        self.yolo.load()
        self.class_names = coco_names_of(self.yolo.names, var=weights_env_var(WEIGHTS_KEY))

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        images = [image.convert("RGB") for image in batch]
        outputs: list[DetectorOutput] = []
        for start in range(0, len(images), self.batch_size):
            chunk = images[start : start + self.batch_size]
            for image, result in zip(chunk, self.yolo.results(chunk), strict=True):
                boxes = result.boxes
                objects = image_objects(
                    boxes.xyxy.float().cpu().tolist(),
                    boxes.conf.float().cpu().tolist(),
                    boxes.cls.int().cpu().tolist(),
                    names=self.class_names,
                    width=image.width,
                    height=image.height,
                )
                outputs.append(DetectorOutput.of(KIND_OBJECTS, {"objects": objects}))
        return outputs
