"""Fixtures for the detector tests: offline environment, real sample photos, tiny models.

Everything here works without network: Hugging Face and ultralytics are told they are offline,
the Hugging Face cache points at an empty folder unless a test fills it, and no
``BIASLAB_*_WEIGHTS`` or ``BIASLAB_FACE_*`` variable leaks in from the shell running the tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


@pytest.fixture(autouse=True)
def offline_ml_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Offline switches on; an empty HF cache; no weights variables from the caller's shell."""
    for name in list(os.environ):
        if name.startswith("BIASLAB_FACE_") or (name.startswith("BIASLAB_") and name.endswith("_WEIGHTS")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    monkeypatch.setenv("YOLO_AUTOINSTALL", "0")
    cache = tmp_path_factory.mktemp("hf-cache")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def _rgb(array: np.ndarray) -> Image.Image:
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    return Image.fromarray(np.ascontiguousarray(array[..., :3]))


@pytest.fixture(scope="session")
def astronaut() -> Image.Image:
    """A woman facing the camera (skimage.data.astronaut)."""
    from skimage import data

    return _rgb(data.astronaut())


@pytest.fixture(scope="session")
def cameraman() -> Image.Image:
    """A man, face partly hidden (skimage.data.camera, grey → RGB)."""
    from skimage import data

    return _rgb(data.camera())


@pytest.fixture(scope="session")
def cat() -> Image.Image:
    from skimage import data

    return _rgb(data.chelsea())


@pytest.fixture(scope="session")
def coffee() -> Image.Image:
    from skimage import data

    return _rgb(data.coffee())


@pytest.fixture(scope="session")
def two_people(astronaut: Image.Image, cameraman: Image.Image) -> Image.Image:
    """The astronaut and the cameraman side by side: two faces of comparable size."""
    return _rgb(np.concatenate([np.asarray(astronaut), np.asarray(cameraman)], axis=1))


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CLIP saved with save_pretrained (built once per test session)."""
    from tests.detectors.tiny_models import save_tiny_clip

    return save_tiny_clip(tmp_path_factory.mktemp("tiny-clip") / "clip")


@pytest.fixture
def tiny_clip(tiny_clip_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """BIASLAB_CLIP_WEIGHTS points at the tiny CLIP for this test."""
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(tiny_clip_dir))
    return tiny_clip_dir


@pytest.fixture(scope="session")
def tiny_yolo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """YOLOv8n from its yaml (random weights) saved as a .pt (built once per test session)."""
    from tests.detectors.tiny_models import save_tiny_yolo

    return save_tiny_yolo(tmp_path_factory.mktemp("tiny-yolo") / "yolov8n-random.pt")


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random LLaVA with its processor and chat template, saved with save_pretrained
    (built once per test session)."""
    from tests.detectors.tiny_models import save_tiny_vlm

    return save_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "vlm")


THREE = [
    ["age", "How old does the person look?", "young:Young:y|old:Old:o"],
    ["wealth", "Is the person wealthy?", "rich:Wealthy:w|poor:Not wealthy:n|unsure:Can't tell:u"],
    ["mood", "How does the person feel?", "happy:Happy:h|sad:Sad:s"],
]


@pytest.fixture
def three_questions(db, tmp_path):
    """A questions study of three questions: one item asks all, one asks age and mood."""
    from studies.services import questions_csv_read, study_define
    from tests.factories import ItemFactory, PromptFactory
    from tests.studies.protocol_data import write_csv

    study = study_define(
        slug="three",
        protocol="questions",
        questions=questions_csv_read(write_csv(tmp_path / "q.csv", ["key", "text", "choices"], THREE)),
        parameters={"compare": "skin"},
    ).study
    prompt = PromptFactory(study=study)
    every = ItemFactory(prompt=prompt, metadata={"skin": "light"})
    two = ItemFactory(prompt=prompt, metadata={"skin": "dark"}, question_keys=["mood", "age"])
    return study, every, two
