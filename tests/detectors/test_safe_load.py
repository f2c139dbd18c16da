"""YOLO weights never run code from the file: restricted unpickling for every .pt, full
unpickling only for a file whose SHA-256 is listed in BIASLAB_TRUSTED_WEIGHTS_SHA256."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from detectors import safe_load
from detectors.base import DetectorUnavailable
from detectors.plugins.persons import PersonDetector, prepare_ultralytics_env


class TrainingNote:
    """A class a training script might leave in a checkpoint: harmless, but not on the allow-list."""

    def __init__(self, text: str) -> None:
        self.text = text


class RunsCode:
    """Unpickling this runs ``exec`` — the classic malicious .pt."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('ran')",))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(path: Path, monkeypatch) -> PersonDetector:
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(path))
    detector = PersonDetector()
    detector.load()
    return detector


@pytest.fixture(autouse=True)
def _nothing_trusted(monkeypatch):
    monkeypatch.delenv(safe_load.TRUST_VAR, raising=False)


@pytest.fixture
def malicious_file(tmp_path: Path) -> tuple[Path, Path]:
    import torch

    marker = tmp_path / "code-ran.txt"
    path = tmp_path / "yolov8n.pt"
    torch.save({"model": RunsCode(marker), "date": "2024-01-01"}, path)
    return path, marker


@pytest.fixture
def checkpoint_with_extra_class(tiny_yolo_file: Path, tmp_path: Path) -> Path:
    import torch

    prepare_ultralytics_env()
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    checkpoint = torch.load(tiny_yolo_file, map_location="cpu", weights_only=False)  # ours: trusted
    checkpoint["note"] = TrainingNote("fine-tuned on our own photos")
    path = tmp_path / "custom.pt"
    torch.save(checkpoint, path)
    return path


def test_a_yolo_checkpoint_loads_with_weights_only_unpickling(tiny_yolo_file, monkeypatch, astronaut):
    import torch

    calls: list[object] = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    detector = _load(tiny_yolo_file, monkeypatch)
    assert calls == [True]
    assert len(detector.detect([astronaut])) == 1  # the model runs


def test_a_crafted_pickle_is_refused_and_its_code_never_runs(malicious_file, monkeypatch):
    path, marker = malicious_file
    with pytest.raises(DetectorUnavailable) as refused:
        _load(path, monkeypatch)
    message = str(refused.value)
    assert "Refused to load" in message
    assert "Nothing from it was run" in message
    assert f"add its SHA-256 {_sha256(path)} to BIASLAB_TRUSTED_WEIGHTS_SHA256" in message
    assert not marker.exists()


def test_the_crafted_pickle_does_run_code_once_trusted(malicious_file, monkeypatch):
    # The control for the test above: this payload is real, so its refusal means something.
    path, marker = malicious_file
    monkeypatch.setenv(safe_load.TRUST_VAR, _sha256(path))
    with pytest.raises(DetectorUnavailable, match="Could not load the trusted YOLO weights"):
        _load(path, monkeypatch)  # it ran, then turned out not to be a model
    assert marker.read_text() == "ran"


def test_a_checkpoint_with_an_unknown_class_is_refused_until_its_digest_is_trusted(
    checkpoint_with_extra_class, monkeypatch, astronaut
):
    with pytest.raises(DetectorUnavailable, match="holds objects outside the safe YOLO checkpoint format"):
        _load(checkpoint_with_extra_class, monkeypatch)
    digest = _sha256(checkpoint_with_extra_class)
    monkeypatch.setenv(safe_load.TRUST_VAR, f"{'0' * 64}, {digest.upper()}")
    detector = _load(checkpoint_with_extra_class, monkeypatch)
    assert len(detector.detect([astronaut])) == 1


def test_trust_is_by_content_not_by_path(checkpoint_with_extra_class, malicious_file, monkeypatch):
    path, marker = malicious_file
    monkeypatch.setenv(safe_load.TRUST_VAR, _sha256(checkpoint_with_extra_class))
    path.replace(checkpoint_with_extra_class)  # someone overwrites the trusted file
    with pytest.raises(DetectorUnavailable, match="Refused to load"):
        _load(checkpoint_with_extra_class, monkeypatch)
    assert not marker.exists()


def test_a_malformed_digest_is_an_error_naming_the_variable(tiny_yolo_file, monkeypatch):
    monkeypatch.setenv(safe_load.TRUST_VAR, "abc123")
    with pytest.raises(
        DetectorUnavailable, match=r"BIASLAB_TRUSTED_WEIGHTS_SHA256 must list SHA-256 digests"
    ):
        _load(tiny_yolo_file, monkeypatch)


def test_without_a_safe_loader_untrusted_files_are_refused(tiny_yolo_file, monkeypatch):
    prepare_ultralytics_env()
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    from ultralytics.nn import tasks

    monkeypatch.delattr(tasks, "SAFE_LOAD")  # as in an ultralytics without the switch
    with pytest.raises(DetectorUnavailable, match=r"cannot load .* without running code from it"):
        _load(tiny_yolo_file, monkeypatch)


def test_a_process_that_loaded_yolo_still_gets_pillows_own_error_for_a_non_image(tiny_yolo_file, monkeypatch):
    # ultralytics' import replaces PIL.Image.open with a wrapper that answers an unidentified
    # file by importing pi-heif (ModuleNotFoundError here); an import refusing a text file named
    # .png must still see UnidentifiedImageError after a detector loaded YOLO.
    prepare_ultralytics_env()
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    from ultralytics.utils import patches

    monkeypatch.setattr(PILImage, "open", patches.image_open)  # as ultralytics' first import leaves it
    _load(tiny_yolo_file, monkeypatch)
    assert PILImage.open is patches._image_open
    with pytest.raises(UnidentifiedImageError):
        PILImage.open(io.BytesIO(b"hello, I am not a picture\n" * 10))
