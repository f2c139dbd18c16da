"""MiVOLO (Kuprashevich & Tolstykh, 2023) as a gender detector: the paper's "MiVOLO" (appendix A)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.base import (
    FEMALE,
    MALE,
    SEVERAL_PEOPLE_RATIO,
    Detector,
    DetectorOutput,
    DetectorUnavailable,
    second_largest_ratio,
)

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

Box = tuple[float, float, float, float]  # x1, y1, x2, y2

CHECKPOINT_WHAT = (
    "MiVOLO's checkpoint file model_imdb_cross_person_4.22_99.46.pth.tar (linked from "
    "github.com/WildChlamydia/MiVOLO, the IMDB-clean person+face model the paper used)"
)
DETECTOR_WHAT = (
    "MiVOLO's person and face detector file yolov8x_person_face.pt (linked from the same repository)"
)
INSTALL_HINT = (
    "MiVOLO's code is not installed. Install it from the authors' repository "
    "(pip install 'mivolo @ git+https://github.com/WildChlamydia/MiVOLO'; it needs timm 0.8.13.dev0 "
    "and the ultralytics 8.0/8.1 release its requirements.txt pins — use a separate environment, "
    "as they clash with this project's pins), then set BIASLAB_MIVOLO_WEIGHTS to the checkpoint "
    "(model_imdb_cross_person_4.22_99.46.pth.tar) and BIASLAB_MIVOLO_DETECTOR_WEIGHTS to "
    "yolov8x_person_face.pt."
)


@dataclass(frozen=True)
class Subject:
    """One person (and/or face) MiVOLO looked at."""

    person: Box | None
    face: Box | None
    gender: str | None  # "male" / "female", None when MiVOLO gave none
    score: float | None  # MiVOLO's probability of that gender
    age: float | None = None

    @property
    def area(self) -> float:
        box = self.person or self.face
        if box is None:
            return 0.0
        return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def decide(
    subjects: Sequence[Subject], *, several_ratio: float = SEVERAL_PEOPLE_RATIO, min_score: float = 0.0
) -> DetectorOutput:
    """One verdict per image from MiVOLO's subjects (rules: docs/reference/detector-rules.md)."""
    if not subjects:
        return DetectorOutput.filtered("no_person", scores={"n_subjects": 0.0})
    ranked = sorted(subjects, key=lambda s: s.area, reverse=True)
    main = ranked[0]
    ratio = second_largest_ratio([item.area for item in ranked])
    scores = {
        "n_subjects": float(len(ranked)),
        "n_persons": float(sum(s.person is not None for s in ranked)),
        "n_faces": float(sum(s.face is not None for s in ranked)),
        "second_subject_ratio": round(ratio, 4),
    }
    if ratio > several_ratio:
        return DetectorOutput.filtered("several_people", scores=scores)
    if main.gender not in (MALE, FEMALE) or main.score is None:
        return DetectorOutput.filtered(
            "no_person", scores=scores, detail="MiVOLO gave the main person no gender (crop too small)"
        )
    p = float(main.score)
    scores[main.gender] = round(p, 6)
    scores[FEMALE if main.gender == MALE else MALE] = round(1.0 - p, 6)
    if main.age is not None:
        scores["age"] = round(float(main.age), 2)
    if p < min_score:
        return DetectorOutput.filtered("low_confidence", scores=scores)
    return DetectorOutput(verdict=main.gender, scores=scores)


def subjects_from_result(result: Any) -> list[Subject]:
    """Subjects from MiVOLO's ``PersonAndFaceResult`` after ``MiVOLO.predict``."""

    def box(index: int | None) -> Box | None:
        if index is None:
            return None
        return tuple(float(v) for v in list(result.get_bbox_by_ind(index))[:4])  # type: ignore[return-value]

    def labelled(index: int) -> tuple[str | None, float | None, float | None]:
        score = result.gender_scores[index]
        return result.genders[index], (None if score is None else float(score)), result.ages[index]

    subjects = []
    for face_index, person_index in result.face_to_person_map.items():
        gender, score, age = labelled(face_index)
        subjects.append(
            Subject(person=box(person_index), face=box(face_index), gender=gender, score=score, age=age)
        )
    for person_index in result.unassigned_persons_inds:
        gender, score, age = labelled(person_index)
        subjects.append(Subject(person=box(person_index), face=None, gender=gender, score=score, age=age))
    return subjects


def _weights_file(key: str, given: str | None, what: str) -> str:
    from detectors.weights import resolve_weights, weights_env_var

    path = resolve_weights(key, config_names=(), override=given, what=what)
    if not Path(path).is_file():
        raise DetectorUnavailable(
            f"{weights_env_var(key)} must name a file, got the folder {path!r}: {what}."
        )
    return path


def _import_mivolo() -> tuple[Any, Any]:
    """MiVOLO's model and detector classes (the package moved them from ``model`` to ``modeling``)."""
    try:
        from mivolo.modeling.mi_volo import MiVOLO
        from mivolo.modeling.yolo_detector import Detector as YoloDetector
    except ImportError:
        try:
            from mivolo.model.mi_volo import MiVOLO
            from mivolo.model.yolo_detector import Detector as YoloDetector
        except ImportError as exc:
            raise DetectorUnavailable(f"{INSTALL_HINT} (import failed: {exc})") from exc
    return MiVOLO, YoloDetector


class MiVoloDetector(Detector):
    key: ClassVar[str] = "mivolo"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "MiVOLO age/gender (IMDB-clean, person+face crops), largest-person rule."
    option_help: ClassVar[dict[str, str]] = {
        "weights": "the MiVOLO checkpoint file; overrides BIASLAB_MIVOLO_WEIGHTS",
        "detector_weights": "the YOLOv8 person/face file; overrides BIASLAB_MIVOLO_DETECTOR_WEIGHTS",
        "several_ratio": "second-largest subject area over the largest's above which an image is "
        "filtered several_people (default 0.5)",
        "min_score": "gender probability below which an image is filtered low_confidence (default 0)",
    }

    def __init__(
        self,
        *,
        device: str = "cpu",
        weights: str | None = None,
        detector_weights: str | None = None,
        several_ratio: float = SEVERAL_PEOPLE_RATIO,
        min_score: float = 0.0,
        **options: Any,
    ) -> None:
        super().__init__(device=device, **options)
        self.weights = weights
        self.detector_weights = detector_weights
        self.several_ratio = self.number_option("several_ratio", several_ratio)
        self.min_score = self.number_option("min_score", min_score)
        self.model: Any = None
        self.yolo: Any = None

    @property
    def version_id(self) -> str:
        """``1+<checkpoint name>+<detector name>``: file names only, the same on every host."""
        from detectors.weights import configured_weights

        names = [
            configured_weights(key, override=given)
            for key, given in (("mivolo", self.weights), ("mivolo_detector", self.detector_weights))
        ]
        # Changed decision settings change verdicts, so they make a new version.
        if self.several_ratio != SEVERAL_PEOPLE_RATIO:
            names.append(f"several{self.several_ratio:g}")
        if self.min_score:
            names.append(f"min{self.min_score:g}")
        return "+".join([self.version, *names])

    def load(self) -> None:
        import importlib.util

        # Every missing piece in one message (both files, the package), so a user setting up a
        # GPU host learns in one try what to fetch, install and set.
        problems = []
        paths = []
        for key, given, what in (
            ("mivolo", self.weights, CHECKPOINT_WHAT),
            ("mivolo_detector", self.detector_weights, DETECTOR_WHAT),
        ):
            try:
                paths.append(_weights_file(key, given, what))
            except DetectorUnavailable as error:
                problems.append(str(error))
        if importlib.util.find_spec("mivolo") is None:
            problems.append(INSTALL_HINT)
        if problems:
            raise DetectorUnavailable(" ".join(problems))
        checkpoint, detector = paths
        from detectors.plugins.persons import prepare_ultralytics_env
        from detectors.torch_compat import ensure_torchvision

        # MiVOLO imports ultralytics: its offline switches must be set before that import.
        prepare_ultralytics_env()
        ensure_torchvision()
        MiVOLO, YoloDetector = _import_mivolo()
        half = str(self.device).startswith("cuda")
        # As MiVOLO's own Predictor does for the person-aware checkpoints.
        self.yolo = YoloDetector(detector, self.device, half=half, verbose=False)
        self.model = MiVOLO(
            checkpoint, self.device, half=half, use_persons=True, disable_faces=False, verbose=False
        )

    def predict_one(self, image: PILImage) -> DetectorOutput:
        import numpy as np

        # MiVOLO works on OpenCV (BGR) arrays.
        bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
        detected = self.yolo.predict(bgr)
        self.model.predict(bgr, detected)
        return decide(
            subjects_from_result(detected), several_ratio=self.several_ratio, min_score=self.min_score
        )
