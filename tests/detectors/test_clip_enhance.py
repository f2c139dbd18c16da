"""CLIP-Enhance: real dlib faces, a random-weight YOLOv8 from its yaml, a tiny CLIP.

Random YOLO boxes mean nothing, so the several-people rule runs on controlled boxes; the real
model still runs once to show its output reaches the rule in the expected shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from detectors import registry
from detectors.base import FEMALE, FILTERED, MALE, DetectorUnavailable
from detectors.plugins.clip_enhance import ClipEnhanceDetector, largest_person_crop, person_rule
from detectors.plugins.persons import PersonBox, PersonDetector, prepare_ultralytics_env


def _box(left: float, top: float, right: float, bottom: float) -> PersonBox:
    return PersonBox(left, top, right, bottom, confidence=0.9)


@pytest.fixture(scope="module")
def detector(tiny_clip_dir: Path, tiny_yolo_file: Path) -> ClipEnhanceDetector:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BIASLAB_CLIP_WEIGHTS", str(tiny_clip_dir))
        patch.setenv("BIASLAB_YOLO_WEIGHTS", str(tiny_yolo_file))
        detector = registry.get("clip_enhance", face_method="hog")
        detector.ensure_loaded()
    return detector


def test_no_box_is_no_person_and_one_box_is_kept():
    assert person_rule([]) == ("no_person", 0.0)
    assert person_rule([_box(0, 0, 10, 20)]) == ("", 0.0)


def test_second_person_over_half_the_largest_area_is_several_people():
    reason, ratio = person_rule([_box(0, 0, 100, 100), _box(0, 0, 80, 80)])
    assert (reason, ratio) == ("several_people", pytest.approx(0.64))


def test_second_person_at_or_under_half_the_largest_area_is_ignored():
    assert person_rule([_box(0, 0, 100, 100), _box(0, 0, 50, 100)])[0] == ""
    assert person_rule([_box(0, 0, 30, 30), _box(0, 0, 100, 100)])[0] == ""


def test_largest_person_is_cropped_inside_the_image():
    image = Image.new("RGB", (200, 100))
    crop = largest_person_crop(image, [_box(10, 10, 30, 30), _box(-5, 20.4, 150.6, 140)])
    assert crop.size == (151, 80)


def test_random_yolo_from_the_env_variable_returns_sorted_person_boxes(detector, astronaut, cat):
    detector.persons.confidence = 1e-4  # random weights: let low scores through
    try:
        per_image = detector.persons.detect([astronaut, cat])
    finally:
        detector.persons.confidence = 0.25
    assert len(per_image) == 2
    for boxes in per_image:
        assert all(isinstance(box, PersonBox) for box in boxes)
        assert [box.area for box in boxes] == sorted((box.area for box in boxes), reverse=True)


def test_each_rule_in_the_papers_order_on_one_batch(detector, astronaut, cat, monkeypatch):
    boxes_for = iter(
        [
            [],  # astronaut #1: no person box
            [_box(0, 0, 200, 400), _box(300, 0, 480, 380)],  # #2: two people of similar size
            [_box(100, 50, 400, 500), _box(0, 0, 40, 80)],  # #3: one person, a small one behind
        ]
    )
    seen_by_yolo: list[int] = []
    crops: list[tuple[int, int]] = []

    def detect(images):
        seen_by_yolo.append(len(images))
        return [next(boxes_for) for _ in images]

    real_similarities = detector.encoder.similarities

    def similarities(images):
        crops.extend(image.size for image in images)
        return real_similarities(images)

    monkeypatch.setattr(detector.persons, "detect", detect)
    monkeypatch.setattr(detector.encoder, "similarities", similarities)
    outputs = detector.predict([astronaut, cat, astronaut, astronaut])

    assert seen_by_yolo == [3]  # the cat never reaches YOLO
    assert [o.filter_reason for o in outputs] == ["no_person", "no_face", "several_people", ""]
    assert crops == [(300, 450)]  # CLIP sees only the largest person of image #4
    kept = outputs[3]
    assert kept.verdict in (MALE, FEMALE)
    assert kept.scores["n_persons"] == 2
    assert kept.scores["p_male"] + kept.scores["p_female"] == pytest.approx(1.0)
    assert outputs[2].verdict == FILTERED


def test_missing_yolo_weights_name_the_yolo_variable(tiny_clip: Path):
    with pytest.raises(DetectorUnavailable, match=r"'yolov8n\.pt'.*BIASLAB_YOLO_WEIGHTS"):
        registry.get("clip_enhance", face_method="hog").ensure_loaded()


def test_yolo_weights_folder_is_refused(tiny_clip: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(tmp_path))
    with pytest.raises(DetectorUnavailable, match="BIASLAB_YOLO_WEIGHTS"):
        PersonDetector().load()


def test_version_names_clip_and_yolo_weights(tiny_clip: Path, monkeypatch):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", "/models/yolov8x.pt")
    version = registry.get("clip_enhance").version_id
    assert f"+{tiny_clip.name}+" in version
    assert "+yolov8x.pt+" in version
    assert "/models/" not in version  # host-specific paths stay out of the version
    assert "dlib-cnn" in version


def test_ultralytics_gets_a_font_so_it_never_downloads_one(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path))
    assert prepare_ultralytics_env() == tmp_path
    assert (tmp_path / "Ultralytics" / "Arial.ttf").stat().st_size > 10_000
    assert (tmp_path / "Ultralytics" / "Arial.Unicode.ttf").is_file()


def test_with_neither_yolo_nor_clip_weights_one_message_names_both_variables(monkeypatch):
    monkeypatch.delenv("BIASLAB_CLIP_WEIGHTS", raising=False)
    with pytest.raises(DetectorUnavailable, match=r"BIASLAB_YOLO_WEIGHTS.*BIASLAB_CLIP_WEIGHTS"):
        registry.get("clip_enhance", face_method="hog").ensure_loaded()
