"""``clip_enhance``: the paper's proposed detector, CLIP-Enhance (Lyu et al. 2025, section 5.1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from detectors.base import SEVERAL_PEOPLE_RATIO, DetectorOutput, DetectorUnavailable, second_largest_ratio
from detectors.plugins.clip import (
    CLIP_OPTIONS,
    GENDER_TEXTS,
    WEIGHTS_KEY,
    WEIGHTS_WHAT,
    clip_encoder,
    gender_scores,
)
from detectors.plugins.faces import FACE_GATE_OPTIONS, FaceGatedDetector
from detectors.plugins.persons import WEIGHTS_KEY as YOLO_WEIGHTS
from detectors.plugins.persons import PersonBox, PersonDetector
from detectors.weights import configured_weights, resolve_weights

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


def person_rule(boxes: Sequence[PersonBox]) -> tuple[str, float]:
    """(filter reason or "", second-largest / largest area) for one image's person boxes."""
    ratio = second_largest_ratio([box.area for box in boxes])
    if not boxes:
        return "no_person", ratio
    if ratio > SEVERAL_PEOPLE_RATIO:
        return "several_people", ratio
    return "", ratio


def largest_person_crop(image: PILImage, boxes: Sequence[PersonBox]) -> PILImage:
    """The image cropped to its largest person box, so CLIP looks at one person."""
    largest = max(boxes, key=lambda box: box.area)
    return image.convert("RGB").crop(largest.crop_box(*image.size))


class ClipEnhanceDetector(FaceGatedDetector):
    key = "clip_enhance"
    version = "1"
    description = "dlib face filter, YOLOv8 several-people filter and person crop, then CLIP"
    option_help = {
        **CLIP_OPTIONS,
        **FACE_GATE_OPTIONS,
        "person_confidence": "YOLO's score threshold for person boxes (default 0.25, ultralytics' own)",
    }

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        confidence = self.number_option("person_confidence", options.get("person_confidence", 0.25))
        self.persons = PersonDetector(device=device, confidence=confidence)
        self.encoder = clip_encoder(self, GENDER_TEXTS)

    @property
    def version_id(self) -> str:
        return (
            f"{self.version}+{configured_weights(WEIGHTS_KEY)}+{configured_weights(YOLO_WEIGHTS)}"
            f"+{self.gate.version_id}+c{self.persons.confidence:g}"
        )

    def load(self) -> None:
        super().load()  # the face gate
        try:
            self.persons.load()
        except DetectorUnavailable as error:
            # Name CLIP's missing weights too, so one try tells a user everything to set; CLIP's
            # are only checked here, not loaded.
            try:
                resolve_weights(WEIGHTS_KEY, what=WEIGHTS_WHAT)
            except DetectorUnavailable as clip_error:
                raise DetectorUnavailable(f"{error} {clip_error}") from error
            raise
        self.encoder.load()

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        outputs: list[DetectorOutput | None] = [None] * len(batch)
        scores: list[dict[str, float]] = [{} for _ in batch]

        # 1. Face filter.
        for i, image in enumerate(batch):
            scores[i]["n_faces"] = float(len(self.gate.detect(image)))
            if not scores[i]["n_faces"]:
                outputs[i] = DetectorOutput.filtered("no_face", scores[i])

        # 2. Person boxes, batched over the images that have a face.
        with_face = [i for i, output in enumerate(outputs) if output is None]
        crops: dict[int, PILImage] = {}
        for i, boxes in zip(with_face, self.persons.detect([batch[i] for i in with_face]), strict=True):
            reason, ratio = person_rule(boxes)
            scores[i].update(n_persons=float(len(boxes)), second_person_ratio=round(ratio, 4))
            if reason:
                outputs[i] = DetectorOutput.filtered(reason, scores[i])
                continue
            scores[i]["person_confidence"] = round(boxes[0].confidence, 4)
            crops[i] = largest_person_crop(batch[i], boxes)

        # 3. CLIP on the crops, one batch.
        if crops:
            sims = self.encoder.similarities(list(crops.values()))
            for row, i in enumerate(crops):
                verdict, clip_scores = gender_scores(sims, row)
                outputs[i] = DetectorOutput(verdict=verdict, scores={**scores[i], **clip_scores})
        return outputs  # type: ignore[return-value]  # every branch above decides
