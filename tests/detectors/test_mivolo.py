"""MiVOLO detector: decision rules on controlled inputs, settings and the missing-package message.

MiVOLO's own code cannot be installed here (see detectors/plugins/mivolo.py), so the network is
not run; what BiasLab adds around it — reading MiVOLO's per-person result and turning it into
one verdict per image — is tested on inputs whose answer is known.
"""

from __future__ import annotations

import importlib.util

import pytest

from detectors import registry
from detectors.base import DetectorUnavailable
from detectors.plugins.mivolo import MiVoloDetector, Subject, decide, subjects_from_result


def person(x: float, w: float, h: float, gender="male", score=0.9, age=30.0, face=True) -> Subject:
    box = (x, 0.0, x + w, h)
    face_box = (x + w / 4, 0.0, x + 3 * w / 4, h / 4) if face else None
    return Subject(person=box, face=face_box, gender=gender, score=score, age=age)


# --- decisions -------------------------------------------------------------------------------


def test_no_person_and_no_face_is_filtered_as_no_person():
    out = decide([])
    assert (out.verdict, out.filter_reason) == ("filtered", "no_person")


def test_one_person_gets_mivolos_gender_with_both_probabilities_and_age():
    out = decide([person(0, 100, 200, gender="female", score=0.8, age=41.5)])
    assert out.verdict == "female"
    assert out.scores["female"] == pytest.approx(0.8)
    assert out.scores["male"] == pytest.approx(0.2)
    assert out.scores["age"] == 41.5
    assert out.scores["n_persons"] == 1.0


def test_two_people_of_similar_size_are_filtered_as_several_people():
    out = decide([person(0, 100, 200), person(150, 90, 190, gender="female")])
    assert (out.verdict, out.filter_reason) == ("filtered", "several_people")
    assert out.scores["second_subject_ratio"] == pytest.approx(90 * 190 / (100 * 200), abs=1e-4)


def test_a_small_bystander_leaves_the_decision_to_the_main_person():
    main = person(0, 100, 200, gender="female", score=0.95)
    bystander = person(300, 30, 60, gender="male", score=0.99)
    assert decide([bystander, main]).verdict == "female"


def test_second_person_at_exactly_half_the_size_does_not_filter():
    assert decide([person(0, 100, 200), person(200, 50, 200, gender="female")]).verdict == "male"


def test_several_ratio_is_configurable():
    subjects = [person(0, 100, 200), person(200, 40, 200, gender="female")]
    assert decide(subjects, several_ratio=0.3).filter_reason == "several_people"


def test_a_lone_face_counts_as_a_subject_by_its_face_box():
    face_only = Subject(person=None, face=(0, 0, 80, 80), gender="male", score=0.7)
    assert decide([face_only]).verdict == "male"
    # Beside a large person, a small lone face is only a bystander.
    assert decide([face_only, person(100, 200, 400, gender="female")]).verdict == "female"


def test_a_main_person_mivolo_gave_no_gender_is_filtered_as_no_person():
    tiny = Subject(person=(0, 0, 40, 45), face=None, gender=None, score=None)
    out = decide([tiny])
    assert (out.verdict, out.filter_reason) == ("filtered", "no_person")
    assert "no gender" in out.detail


def test_low_scores_pass_by_default_and_are_filtered_below_min_score():
    weak = [person(0, 100, 200, score=0.55)]
    assert decide(weak).verdict == "male"
    out = decide(weak, min_score=0.6)
    assert (out.verdict, out.filter_reason) == ("filtered", "low_confidence")
    assert out.scores["male"] == pytest.approx(0.55)


# --- reading MiVOLO's result -----------------------------------------------------------------


class MiVoloResultShape:
    """The attributes of mivolo.structures.PersonAndFaceResult that BiasLab reads."""

    def __init__(self, boxes, face_to_person_map, unassigned_persons_inds, genders, scores, ages):
        self.boxes = boxes
        self.face_to_person_map = face_to_person_map
        self.unassigned_persons_inds = unassigned_persons_inds
        self.genders = genders
        self.gender_scores = scores
        self.ages = ages

    def get_bbox_by_ind(self, index):
        return self.boxes[index]


def test_subjects_pair_each_face_with_its_person_and_keep_lone_faces_and_persons():
    # Detections: 0 person A, 1 face of A, 2 lone face, 3 person B without a face.
    result = MiVoloResultShape(
        boxes=[(0, 0, 100, 200), (30, 5, 70, 50), (300, 0, 340, 40), (500, 0, 560, 120)],
        face_to_person_map={1: 0, 2: None},
        unassigned_persons_inds=[3],
        genders=["female", "female", "male", None],
        scores=[0.9, 0.9, 0.6, None],
        ages=[25.0, 25.0, 40.0, None],
    )
    subjects = subjects_from_result(result)
    assert subjects == [
        Subject(person=(0, 0, 100, 200), face=(30, 5, 70, 50), gender="female", score=0.9, age=25.0),
        Subject(person=None, face=(300, 0, 340, 40), gender="male", score=0.6, age=40.0),
        Subject(person=(500, 0, 560, 120), face=None, gender=None, score=None, age=None),
    ]
    # Person A (20,000 px²) dominates person B (7,200) and the lone face (1,600).
    assert decide(subjects).verdict == "female"


# --- settings and the package ----------------------------------------------------------------


def test_registry_resolves_mivolo_to_this_detector():
    assert registry.detector_class("mivolo") is MiVoloDetector


def test_without_a_checkpoint_load_names_the_setting_to_fill():
    with pytest.raises(DetectorUnavailable, match="BIASLAB_MIVOLO_WEIGHTS"):
        MiVoloDetector().load()


def test_without_detector_weights_load_names_that_setting(tmp_path, monkeypatch):
    checkpoint = tmp_path / "model_imdb_cross_person_4.22_99.46.pth.tar"
    checkpoint.write_bytes(b"not read before the detector weights are found")
    monkeypatch.setenv("BIASLAB_MIVOLO_WEIGHTS", str(checkpoint))
    with pytest.raises(DetectorUnavailable, match="BIASLAB_MIVOLO_DETECTOR_WEIGHTS"):
        MiVoloDetector().load()


@pytest.mark.skipif(importlib.util.find_spec("mivolo") is not None, reason="MiVOLO is installed here")
def test_with_both_files_but_no_mivolo_package_load_says_what_to_install(tmp_path, monkeypatch):
    checkpoint = tmp_path / "model_imdb_cross_person_4.22_99.46.pth.tar"
    detector = tmp_path / "yolov8x_person_face.pt"
    checkpoint.write_bytes(b"x")
    detector.write_bytes(b"x")
    monkeypatch.setenv("BIASLAB_MIVOLO_WEIGHTS", str(checkpoint))
    monkeypatch.setenv("BIASLAB_MIVOLO_DETECTOR_WEIGHTS", str(detector))
    with pytest.raises(DetectorUnavailable, match=r"git\+https://github.com/WildChlamydia/MiVOLO"):
        MiVoloDetector().load()


def test_version_names_both_weight_files_without_their_folders(monkeypatch):
    monkeypatch.setenv("BIASLAB_MIVOLO_WEIGHTS", "/gpu-a/models/model_imdb_cross_person_4.22_99.46.pth.tar")
    monkeypatch.setenv("BIASLAB_MIVOLO_DETECTOR_WEIGHTS", "/gpu-a/models/yolov8x_person_face.pt")
    assert (
        MiVoloDetector().version_id == "1+model_imdb_cross_person_4.22_99.46.pth.tar+yolov8x_person_face.pt"
    )


@pytest.mark.skipif(importlib.util.find_spec("mivolo") is not None, reason="MiVOLO is installed here")
def test_with_nothing_set_one_message_names_both_files_and_the_package_to_install():
    with pytest.raises(DetectorUnavailable) as error:
        MiVoloDetector().load()
    message = str(error.value)
    for needed in (
        "BIASLAB_MIVOLO_WEIGHTS to MiVOLO's checkpoint file model_imdb_cross_person_4.22_99.46.pth.tar",
        "BIASLAB_MIVOLO_DETECTOR_WEIGHTS to MiVOLO's person and face detector file yolov8x_person_face.pt",
        "pip install 'mivolo @ git+https://github.com/WildChlamydia/MiVOLO'",
    ):
        assert needed in message


def test_changed_decision_settings_make_a_new_version(monkeypatch):
    monkeypatch.setenv("BIASLAB_MIVOLO_WEIGHTS", "/m/ckpt.pth.tar")
    monkeypatch.setenv("BIASLAB_MIVOLO_DETECTOR_WEIGHTS", "/m/det.pt")
    assert MiVoloDetector().version_id == "1+ckpt.pth.tar+det.pt"
    assert (
        MiVoloDetector(several_ratio=0.7, min_score=0.6).version_id
        == "1+ckpt.pth.tar+det.pt+several0.7+min0.6"
    )
