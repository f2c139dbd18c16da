"""FairFace (Kärkkäinen & Joo, 2021) as a gender detector: the paper's "FairFace" (appendix A)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from detectors.base import (
    FEMALE,
    MALE,
    SEVERAL_PEOPLE_RATIO,
    Detector,
    DetectorOutput,
    DetectorUnavailable,
    FaceDecision,
    face_decision,
)

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

CHECKPOINT_NAME = "res34_fair_align_multi_7_20190809.pt"
N_OUTPUTS = 18
GENDER_SLICE = slice(7, 9)  # order: male, female (predict.py: 0 → "Male", 1 → "Female")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
CHIP_SIZE = 300
INPUT_SIZE = 224


def gender_probabilities(logits: Any) -> tuple[float, float]:
    """(P(male), P(female)) from one row of the 18 FairFace logits."""
    gender = np.asarray(logits, dtype=np.float64)[GENDER_SLICE]
    exp = np.exp(gender - gender.max())
    p = exp / exp.sum()
    return float(p[0]), float(p[1])


def to_input_array(chip: PILImage) -> np.ndarray:
    """A 3x224x224 float32 array: resized, scaled to [0, 1], ImageNet-normalised."""
    from PIL import Image

    resized = chip.convert("RGB").resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.BILINEAR)
    array = np.asarray(resized, dtype=np.float32) / 255.0
    return ((array - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1).copy()


def resize_longer_side(image: PILImage, max_side: int) -> PILImage:
    """FairFace's resize: the longer side becomes ``max_side``, enlarging small images too."""
    from PIL import Image

    width, height = image.size
    scale = max_side / max(width, height)
    if scale == 1:
        return image
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR)


def checkpoint_path(value: str, var: str) -> Path:
    """The checkpoint file, given the file itself or a folder holding it."""
    path = Path(value)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise DetectorUnavailable(
            f"FairFace checkpoint {str(path)!r} not found: set {var} to the file {CHECKPOINT_NAME} "
            "(from github.com/dchen236/FairFace) or a folder holding it."
        )
    return path


class FairFaceDetector(Detector):
    key: ClassVar[str] = "fairface"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "dlib CNN faces, 5-point alignment, FairFace ResNet-34 gender head."
    option_help: ClassVar[dict[str, str]] = {
        "weights": f"the {CHECKPOINT_NAME} file or its folder; overrides BIASLAB_FAIRFACE_WEIGHTS",
        "max_side": "longer side images are resized to before face detection (default 800, FairFace's)",
        "upsample": "dlib CNN upsampling (default 1, FairFace's; 0 is ~4x faster, misses small faces)",
        "several_ratio": "second-largest face area over the largest's above which an image is "
        "filtered several_people (default 0.5)",
    }

    def __init__(
        self,
        *,
        device: str = "cpu",
        weights: str | None = None,
        max_side: int = 800,
        upsample: int = 1,
        several_ratio: float = SEVERAL_PEOPLE_RATIO,
        **options: Any,
    ) -> None:
        super().__init__(device=device, **options)
        self.weights = weights
        self.max_side = self.number_option("max_side", max_side, int, minimum=1)
        self.upsample = self.number_option("upsample", upsample, int)
        self.several_ratio = self.number_option("several_ratio", several_ratio)
        self.model: Any = None

    @property
    def version_id(self) -> str:
        """``1+<checkpoint file name>``; the face and several-people settings join it when changed."""
        from detectors.weights import configured_value, weights_label

        value = configured_value(self.key, override=self.weights)
        # A folder is read for CHECKPOINT_NAME inside it (checkpoint_path), so name that file.
        name = CHECKPOINT_NAME if value and Path(value).is_dir() else weights_label(value)
        settings = "" if (self.max_side, self.upsample) == (800, 1) else f"@{self.max_side}u{self.upsample}"
        # A changed several_ratio changes verdicts, so it makes a new version.
        if self.several_ratio != SEVERAL_PEOPLE_RATIO:
            settings += f"+several{self.several_ratio:g}"
        return f"{self.version}+{name}{settings}"

    def load(self) -> None:
        from detectors.plugins import faces
        from detectors.weights import resolve_weights, weights_env_var

        var = weights_env_var(self.key)
        what = (
            f"the FairFace checkpoint {CHECKPOINT_NAME} (github.com/dchen236/FairFace) or a folder holding it"
        )
        path = checkpoint_path(
            resolve_weights(self.key, config_names=(), override=self.weights, what=what), var
        )
        faces.load_models("cnn", align=True)
        from detectors.torch_compat import ensure_torchvision

        ensure_torchvision()
        import torch
        import torchvision

        model = torchvision.models.resnet34(weights=None)
        model.fc = torch.nn.Linear(model.fc.in_features, N_OUTPUTS)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(state, dict) and "state_dict" in state:
                state = state["state_dict"]
            # Checkpoints saved from nn.DataParallel prefix every key with "module.".
            state = {k.removeprefix("module."): v for k, v in state.items()}
            model.load_state_dict(state)
        except (RuntimeError, OSError, AttributeError, ValueError) as exc:
            raise DetectorUnavailable(
                f"{path} is not a FairFace ResNet-34 state_dict with an 18-output head ({exc}); "
                f"set {var} to {CHECKPOINT_NAME}."
            ) from exc
        self.model = model.to(self.device).eval()

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        from detectors.plugins import faces

        outputs: list[DetectorOutput | None] = []
        chips: list[PILImage] = []
        decisions: list[FaceDecision] = []
        for image in batch:
            resized = resize_longer_side(image.convert("RGB"), self.max_side)
            found = faces.detect_faces(resized, "cnn", self.upsample)
            decision = face_decision(found, several_ratio=self.several_ratio)
            decisions.append(decision)
            if decision.main is None:
                outputs.append(DetectorOutput.filtered(decision.reason, scores=decision.scores))
                continue
            chips.append(faces.align_faces(resized, [decision.main], size=CHIP_SIZE, padding=0.25)[0])
            outputs.append(None)
        probabilities = iter(self.classify(chips))
        return [
            out if out is not None else self._verdict(next(probabilities), decision.scores)
            for out, decision in zip(outputs, decisions, strict=True)
        ]

    def classify(self, chips: Sequence[PILImage]) -> list[tuple[float, float]]:
        """(P(male), P(female)) for each aligned face chip, in one forward pass."""
        if not chips:
            return []
        import torch

        tensor = torch.from_numpy(np.stack([to_input_array(chip) for chip in chips])).to(self.device)
        with torch.inference_mode():
            logits = self.model(tensor).float().cpu().numpy()
        return [gender_probabilities(row) for row in logits]

    @staticmethod
    def _verdict(probabilities: tuple[float, float], scores: dict[str, float]) -> DetectorOutput:
        p_male, p_female = probabilities
        scores = {**scores, "male": round(p_male, 6), "female": round(p_female, 6)}
        return DetectorOutput(verdict=MALE if p_male >= p_female else FEMALE, scores=scores)
