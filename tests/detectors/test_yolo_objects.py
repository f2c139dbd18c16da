"""``yolo_objects``: a random-weight YOLOv8n with COCO class names, built and saved here, runs
offline; the real checkpoint runs on a real photo when ``BIASLAB_YOLO_WEIGHTS`` names one.

Random weights find nothing meaningful (every score is about 1e-4), so the detector's own work —
class names, clipping, order, thresholds, batching, storage — is checked on what they do find at
a very low threshold, and on controlled boxes through the pure ``image_objects``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from PIL import Image

from detectors import registry
from detectors.base import DetectorOptionError, DetectorUnavailable
from detectors.kinds import validate_objects
from detectors.models import Prediction
from detectors.plugins.yolo_objects import YoloObjectsDetector, coco_names_of, image_objects
from metrics.coco_names import COCO_CLASS_NAMES
from tests.factories import ItemFactory, PromptFactory, image_of
from tests.paper_data import DARKNET_COCO_NAMES

#: Read before the autouse fixture clears BIASLAB_*_WEIGHTS for every test.
REAL_WEIGHTS = os.environ.get("BIASLAB_YOLO_WEIGHTS", "")
LOW = 1e-4  # below every random-weight score: random YOLO boxes only show up under it


def _save_yolo(path: Path, names: tuple[str, ...]) -> Path:
    """YOLOv8n from its yaml (random weights, offline) with ``names`` as its classes, saved."""
    from detectors.plugins.persons import prepare_ultralytics_env

    prepare_ultralytics_env()
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO("yolov8n.yaml")
    model.model.names = dict(enumerate(names))
    model.save(str(path))
    return path


@pytest.fixture(scope="module")
def coco_yolo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_yolo(tmp_path_factory.mktemp("yolo-coco") / "yolov8n-coco-random.pt", COCO_CLASS_NAMES)


@pytest.fixture(scope="module")
def detector(coco_yolo_file: Path) -> YoloObjectsDetector:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BIASLAB_YOLO_WEIGHTS", str(coco_yolo_file))
        detector = registry.get("yolo_objects", confidence=LOW, max_det=6, batch_size=2)
        detector.ensure_loaded()
    return detector


@pytest.fixture(scope="module")
def wide() -> Image.Image:
    """A non-square, non-RGB image: greyscale noise, 300 x 120."""
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (120, 300), dtype=np.uint8), mode="L")


# --- the pure part ------------------------------------------------------------------------------


def test_boxes_are_clipped_to_the_image_and_boxes_left_without_area_are_dropped():
    names = {0: "person", 41: "cup", 56: "chair"}
    found = image_objects(
        [
            [-5.0, 10.0, 50.0, 130.0],
            [10.0, 10.0, 20.0, 20.0],
            [110.0, 5.0, 140.0, 50.0],
            [3.0, 4.0, 3.0, 9.0],
        ],
        [0.5, 0.9, 0.7, 0.8],
        [0, 41, 56, 0],
        names=names,
        width=100,
        height=120,
    )
    # The chair lies right of the 100 px image and the last box has no width: both dropped.
    assert found == [
        {"class": "cup", "confidence": 0.9, "box": [10.0, 10.0, 20.0, 20.0]},
        {"class": "person", "confidence": 0.5, "box": [0.0, 10.0, 50.0, 120.0]},
    ]
    assert validate_objects({"objects": found}) == {"objects": found}


def test_instances_are_ordered_by_confidence_then_class_then_box_whatever_the_input_order():
    boxes = [[0, 0, 5, 5], [1, 1, 4, 4], [0, 0, 9, 9], [2, 2, 3.333333, 3]]
    confidences = [0.4, 0.4, 0.4, 0.9]
    classes = [1, 0, 0, 2]
    names = {0: "person", 1: "bicycle", 2: "car"}
    forward = image_objects(boxes, confidences, classes, names=names, width=10, height=10)
    backward = image_objects(boxes[::-1], confidences[::-1], classes[::-1], names=names, width=10, height=10)
    assert forward == backward
    assert [(o["class"], o["box"][2]) for o in forward] == [
        ("car", 3.33),
        ("bicycle", 5.0),
        ("person", 9.0),  # [0, 0, 9, 9] sorts before [1, 1, 4, 4]
        ("person", 4.0),
    ]


def test_darknet_class_names_of_a_checkpoint_become_the_ultralytics_ones():
    names = coco_names_of(dict(enumerate(DARKNET_COCO_NAMES)), var="BIASLAB_YOLO_WEIGHTS")
    assert names == dict(enumerate(COCO_CLASS_NAMES))
    assert [names[i] for i in (3, 4, 57, 60, 62)] == ["motorcycle", "airplane", "couch", "dining table", "tv"]


def test_a_checkpoint_with_a_class_outside_coco_is_refused_naming_it():
    with pytest.raises(
        DetectorUnavailable, match=r"weights in BIASLAB_YOLO_WEIGHTS .* not COCO classes \('face'\)"
    ):
        coco_names_of({0: "person", 1: "face"}, var="BIASLAB_YOLO_WEIGHTS")


# --- options and version ------------------------------------------------------------------------


def test_version_names_the_weights_and_every_threshold(monkeypatch):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", "/models/yolov8x.pt")
    assert registry.get("yolo_objects").version_id == "1+yolov8x.pt+c0.25+iou0.7+s640+m300"
    custom = registry.get("yolo_objects", confidence=0.5, iou=0.45, image_size=1024, max_det=50, batch_size=4)
    assert custom.version_id == "1+yolov8x.pt+c0.5+iou0.45+s1024+m50"
    # Batch size changes speed only, never what is found: not part of the version.
    assert registry.get("yolo_objects", batch_size=64).version_id == "1+yolov8x.pt+c0.25+iou0.7+s640+m300"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"confidence": 1.5}, "confidence must be between 0 and 1"),
        ({"iou": -0.1}, "iou must be a number ≥ 0"),
        ({"iou": "high"}, "iou must be a number"),
        ({"image_size": 16}, "image_size must be an integer ≥ 32"),
        ({"max_det": 2.5}, "max_det must be an integer"),
        ({"batch_size": 0}, "batch_size must be an integer ≥ 1"),
        ({"classes": "person"}, "does not take the option"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(options, message):
    with pytest.raises(DetectorOptionError, match=message):
        registry.get("yolo_objects", **options)


def test_missing_weights_name_the_yolo_variable():
    with pytest.raises(DetectorUnavailable, match=r"'yolov8n\.pt'.*BIASLAB_YOLO_WEIGHTS"):
        registry.get("yolo_objects").ensure_loaded()


def test_a_model_with_numbered_classes_only_is_refused_at_load(tiny_yolo_file: Path, monkeypatch):
    # YOLO("yolov8n.yaml") names its 80 classes "0" … "79": not a vocabulary the study can count.
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(tiny_yolo_file))
    with pytest.raises(DetectorUnavailable, match=r"\('0', '1', '2', '3', '4' and 75 more\)"):
        registry.get("yolo_objects").ensure_loaded()


# --- the random-weight model --------------------------------------------------------------------


def test_every_instance_has_a_coco_class_a_confidence_and_a_box_inside_its_image(
    detector, astronaut, cat, wide
):
    images = [astronaut, cat, wide]
    outputs = detector.predict(images)
    assert len(outputs) == 3
    for image, output in zip(images, outputs, strict=True):
        assert output.kind == "objects"
        objects = output.as_output()["objects"]
        assert 1 <= len(objects) <= 6  # max_det
        confidences = [o["confidence"] for o in objects]
        assert confidences == sorted(confidences, reverse=True)
        for found in objects:
            assert found["class"] in COCO_CLASS_NAMES
            assert LOW <= found["confidence"] <= 1
            x0, y0, x1, y1 = found["box"]
            assert 0 <= x0 < x1 <= image.width
            assert 0 <= y0 < y1 <= image.height


def test_an_image_gives_the_same_objects_alone_and_in_any_batch(detector, astronaut, cat, wide):
    alone = [detector.predict([image])[0].as_output()["objects"] for image in (astronaut, cat, wide)]
    together = [output.as_output()["objects"] for output in detector.predict([wide, cat, astronaut])][::-1]
    for single, batched in zip(alone, together, strict=True):
        assert [o["class"] for o in single] == [o["class"] for o in batched]
        for a, b in zip(single, batched, strict=True):
            assert a["confidence"] == pytest.approx(b["confidence"], abs=2e-6)
            assert a["box"] == pytest.approx(b["box"], abs=0.05)


def test_at_the_default_threshold_random_weights_find_nothing_and_say_so(coco_yolo_file, monkeypatch, cat):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(coco_yolo_file))
    (output,) = registry.get("yolo_objects").predict([cat])
    assert output.as_output() == {"objects": []}


def test_a_darknet_named_checkpoint_reports_ultralytics_names(tmp_path, monkeypatch, astronaut):
    weights = _save_yolo(tmp_path / "darknet-names.pt", DARKNET_COCO_NAMES)
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(weights))
    detector = registry.get("yolo_objects", confidence=LOW, max_det=300)
    detector.ensure_loaded()
    assert detector.class_names == dict(enumerate(COCO_CLASS_NAMES))
    (output,) = detector.predict([astronaut])
    assert {o["class"] for o in output.as_output()["objects"]} <= set(COCO_CLASS_NAMES)


@pytest.mark.django_db
def test_run_detectors_stores_an_objects_prediction_per_file(study, coco_yolo_file, monkeypatch):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", str(coco_yolo_file))
    prompt = PromptFactory(study=study)
    files = [image_of(ItemFactory(prompt=prompt)) for _ in range(3)]
    out = io.StringIO()
    call_command(
        "run_detectors",
        "--detector",
        "yolo_objects",
        "--option",
        f"confidence={LOW}",
        "--option",
        "max_det=3",
        stdout=out,
        stderr=io.StringIO(),
    )
    stored = {p.image_id: p for p in Prediction.objects.filter(detector="yolo_objects")}
    assert set(stored) == {f.pk for f in files}
    for image in files:
        prediction = stored[image.pk]
        assert (prediction.kind, prediction.status) == ("objects", "ok")
        assert prediction.version == "1+yolov8n-coco-random.pt+c0.0001+iou0.7+s640+m3"
        for found in prediction.output["objects"]:
            assert found["class"] in COCO_CLASS_NAMES
            assert found["box"][2] <= image.width
            assert found["box"][3] <= image.height


# --- imported objects ---------------------------------------------------------------------------


def _import(tmp_path: Path, rows: list[dict[str, str]]) -> str:
    path = tmp_path / "objects.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "detector", "kind", "output"])
        writer.writeheader()
        writer.writerows(rows)
    out = io.StringIO()
    call_command("import_predictions", str(path), stdout=out)
    return out.getvalue()


def _objects(*names: str) -> str:
    return json.dumps(
        {"objects": [{"class": name, "confidence": 0.5, "box": [0, 0, 4, 4]} for name in names]}
    )


@pytest.mark.django_db
def test_darknet_names_in_imported_objects_are_stored_in_the_ultralytics_vocabulary(study, tmp_path):
    prompt = PromptFactory(study=study)
    ItemFactory(prompt=prompt, key="sd/0.png")
    _import(
        tmp_path,
        [
            {
                "image": "sd/0.png",
                "detector": "yolov3",
                "kind": "objects",
                "output": _objects("motorbike", "sofa", "aeroplane", "diningtable", "tvmonitor"),
            }
        ],
    )
    stored = Prediction.objects.get(detector="yolov3").output["objects"]
    assert [o["class"] for o in stored] == ["motorcycle", "couch", "airplane", "dining table", "tv"]


@pytest.mark.django_db
def test_an_unknown_class_name_in_imported_objects_is_an_error_of_its_row(study, tmp_path):
    prompt = PromptFactory(study=study)
    ItemFactory(prompt=prompt, key="sd/0.png")
    ItemFactory(prompt=prompt, key="sd/1.png")
    with pytest.raises(
        CommandError, match=r"line 3: output\.objects\[1\]\.class: unknown object class 'hat'"
    ):
        _import(
            tmp_path,
            [
                {"image": "sd/0.png", "detector": "yolov3", "kind": "objects", "output": _objects("tie")},
                {
                    "image": "sd/1.png",
                    "detector": "yolov3",
                    "kind": "objects",
                    "output": _objects("cup", "hat"),
                },
            ],
        )
    assert not Prediction.objects.exists()


# --- the real checkpoint ------------------------------------------------------------------------


@pytest.mark.realmodel
@pytest.mark.skipif(not REAL_WEIGHTS, reason="BIASLAB_YOLO_WEIGHTS is unset: no real YOLO checkpoint here")
def test_the_real_checkpoint_finds_the_astronaut_as_a_person(monkeypatch, astronaut, cat):
    monkeypatch.setenv("BIASLAB_YOLO_WEIGHTS", REAL_WEIGHTS)
    person, pet = registry.get("yolo_objects").predict([astronaut, cat])
    people = [o for o in person.as_output()["objects"] if o["class"] == "person"]
    assert people, person.as_output()
    x0, y0, x1, y1 = people[0]["box"]
    assert people[0]["confidence"] > 0.5
    assert (x1 - x0) * (y1 - y0) > 0.2 * astronaut.width * astronaut.height  # she fills the frame
    assert "cat" in {o["class"] for o in pet.as_output()["objects"]}
