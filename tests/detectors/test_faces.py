"""dlib face detection and alignment on the real shipped models and real photos."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from detectors.plugins.faces import FaceBox, align_faces, detect_faces, models_dir

pytestmark = pytest.mark.realmodel


def test_model_files_are_found_without_importing_face_recognition_models():
    import sys

    assert (models_dir() / "mmod_human_face_detector.dat").is_file()
    assert "face_recognition_models" not in sys.modules


def test_hog_finds_the_astronauts_face_and_nothing_on_the_cat(astronaut, cat):
    (face,) = detect_faces(astronaut, method="hog")
    assert 150 < (face.left + face.right) / 2 < 300
    assert 50 < (face.top + face.bottom) / 2 < 200
    assert detect_faces(cat, method="hog") == []


def test_cnn_finds_the_partly_hidden_cameraman_that_hog_misses(cameraman):
    assert detect_faces(cameraman, method="hog") == []
    (face,) = detect_faces(np.asarray(cameraman), method="cnn")
    assert face.confidence > 0.5
    assert face.area > 60 * 60


def test_boxes_from_a_downscaled_image_are_in_original_coordinates(astronaut):
    big = astronaut.resize((1024, 1024))
    (face,) = detect_faces(big, method="hog", max_side=512)
    (small,) = detect_faces(astronaut, method="hog")
    assert abs(face.left - 2 * small.left) <= 4
    assert abs(face.bottom - 2 * small.bottom) <= 4


def test_faces_come_largest_first():
    boxes = [FaceBox(0, 0, 10, 10, 1.0), FaceBox(0, 0, 30, 30, 1.0)]
    assert sorted(boxes, key=lambda b: b.area, reverse=True)[0].area == 900


def test_aligned_face_is_a_square_crop_of_the_requested_size(astronaut):
    faces = detect_faces(astronaut, method="hog")
    (chip,) = align_faces(astronaut, faces, size=96)
    assert isinstance(chip, Image.Image)
    assert chip.size == (96, 96)
    assert align_faces(astronaut, []) == []


def test_unknown_method_and_non_rgb_input_are_refused(astronaut):
    with pytest.raises(ValueError, match="method"):
        detect_faces(astronaut, method="mediapipe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RGB uint8"):
        detect_faces(np.zeros((10, 10), dtype=np.uint8))


def test_face_gate_reads_options_then_environment_then_defaults(monkeypatch):
    from detectors.plugins.faces import FaceGate

    assert FaceGate.from_options({}) == FaceGate("cnn", 0, 1024)
    monkeypatch.setenv("BIASLAB_FACE_METHOD", "hog")
    monkeypatch.setenv("BIASLAB_FACE_MAX_SIDE", "0")
    assert FaceGate.from_options({}) == FaceGate("hog", 0, None)
    assert FaceGate.from_options({"face_method": "cnn", "face_upsample": 1}).version_id == "dlib-cnn-up1-max0"


def test_face_gate_refuses_bad_settings(monkeypatch):
    from detectors.plugins.faces import FaceGate

    monkeypatch.setenv("BIASLAB_FACE_UPSAMPLE", "two")
    with pytest.raises(ValueError, match="integers"):
        FaceGate.from_options({})
    with pytest.raises(ValueError, match="negative"):
        FaceGate.from_options({"face_upsample": -1})
