"""FairFace detector: real dlib faces on real photos, a ResNet-34 with a rigged 18-output head.

The checkpoint is a real torchvision ResNet-34 state_dict (random backbone) whose ``fc`` is set so
that the race and age logits are large and equal and only the gender pair (indices 7, 8) decides:
reading the wrong slice, or the two gender logits in the wrong order, fails these tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from detectors import registry
from detectors.base import DetectorUnavailable
from detectors.plugins.faces import FaceBox
from detectors.plugins.fairface import (
    CHECKPOINT_NAME,
    FairFaceDetector,
    face_decision,
    gender_probabilities,
    resize_longer_side,
    to_input_array,
)

# Small images and no upsampling keep dlib's CNN at ~2 s an image here; FairFace's own
# settings (800 px, upsample 1) take several times longer on this CPU.
FAST = {"max_side": 512, "upsample": 0}


def _rigged_state_dict(gender_bias: tuple[float, float]):
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet34(weights=None)
    model.fc = torch.nn.Linear(model.fc.in_features, 18)
    with torch.no_grad():
        model.fc.weight.zero_()
        model.fc.bias.fill_(10.0)  # race and age logits: large, equal, irrelevant
        model.fc.bias[7], model.fc.bias[8] = gender_bias
    return model.state_dict()


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    import torch

    folder = tmp_path_factory.mktemp("fairface")
    torch.save(_rigged_state_dict((0.0, 3.0)), folder / CHECKPOINT_NAME)  # says "female"
    return folder


@pytest.fixture(scope="module")
def loaded(checkpoint_dir):
    det = FairFaceDetector(weights=str(checkpoint_dir / CHECKPOINT_NAME), **FAST)
    det.ensure_loaded()
    return det


# --- configuration ---------------------------------------------------------------------------


def test_registry_resolves_fairface_to_this_detector():
    assert registry.detector_class("fairface") is FairFaceDetector


def test_without_weights_load_names_the_setting_to_fill():
    with pytest.raises(DetectorUnavailable, match="BIASLAB_FAIRFACE_WEIGHTS"):
        FairFaceDetector().load()


def test_a_folder_without_the_checkpoint_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BIASLAB_FAIRFACE_WEIGHTS", str(tmp_path))
    with pytest.raises(DetectorUnavailable, match=f"BIASLAB_FAIRFACE_WEIGHTS to the file {CHECKPOINT_NAME}"):
        FairFaceDetector().load()


def test_a_checkpoint_with_another_head_is_refused(tmp_path):
    import torch

    path = tmp_path / "imagenet.pt"
    torch.save({"fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)}, path)
    with pytest.raises(DetectorUnavailable, match="18-output head"):
        FairFaceDetector(weights=str(path)).load()


def test_version_names_the_checkpoint_file_and_any_changed_face_settings(checkpoint_dir, monkeypatch):
    monkeypatch.setenv("BIASLAB_FAIRFACE_WEIGHTS", str(checkpoint_dir))
    assert FairFaceDetector().version_id == f"1+{CHECKPOINT_NAME}"
    assert FairFaceDetector(**FAST).version_id == f"1+{CHECKPOINT_NAME}@512u0"


# --- pure pieces -----------------------------------------------------------------------------


def box(width: int, height: int, left: int = 0) -> FaceBox:
    return FaceBox(left=left, top=0, right=left + width, bottom=height, confidence=1.0)


def test_no_face_means_no_face():
    assert face_decision([]).reason == "no_face"


def test_a_single_face_is_the_main_face():
    decision = face_decision([box(50, 50)])
    assert decision.main == box(50, 50)
    assert decision.scores["n_faces"] == 1.0


def test_two_faces_of_similar_size_are_several_people():
    assert face_decision([box(40, 40), box(50, 50, left=60)]).reason == "several_people"


def test_a_small_second_face_leaves_the_largest_as_main_face():
    decision = face_decision([box(20, 20), box(50, 50, left=60)])
    assert decision.main == box(50, 50, left=60)
    assert decision.scores["second_face_ratio"] == pytest.approx(0.16)


def test_gender_probabilities_read_indices_7_and_8_as_male_then_female():
    logits = np.zeros(18)
    logits[:7] = 50.0  # race
    logits[9:] = -50.0  # age
    logits[7], logits[8] = 2.0, 0.0
    p_male, p_female = gender_probabilities(logits)
    assert p_male == pytest.approx(np.exp(2) / (np.exp(2) + 1))
    assert p_male + p_female == pytest.approx(1.0)


def test_input_is_224_square_and_imagenet_normalised():
    array = to_input_array(Image.new("RGB", (300, 300), (255, 0, 128)))
    assert array.shape == (3, 224, 224)
    assert array[0, 0, 0] == pytest.approx((1 - 0.485) / 0.229, rel=1e-5)
    assert array[1, 100, 100] == pytest.approx((0 - 0.456) / 0.224, rel=1e-5)
    assert array[2, 5, 200] == pytest.approx((128 / 255 - 0.406) / 0.225, rel=1e-5)


def test_resize_makes_the_longer_side_exactly_max_side_up_or_down():
    assert resize_longer_side(Image.new("RGB", (400, 200)), 800).size == (800, 400)
    assert resize_longer_side(Image.new("RGB", (1600, 1000)), 800).size == (800, 500)


# --- real photos, real dlib ------------------------------------------------------------------


@pytest.mark.realmodel
def test_astronaut_is_classified_and_objects_are_filtered_as_no_face_in_one_batch(
    loaded, astronaut, coffee, cat
):
    outs = loaded.predict([astronaut, coffee, cat])
    assert [o.verdict for o in outs] == ["female", "filtered", "filtered"]
    assert [o.filter_reason for o in outs[1:]] == ["no_face", "no_face"]
    assert outs[0].scores["female"] == pytest.approx(np.exp(3) / (np.exp(3) + 1), rel=1e-4)
    assert outs[0].scores["n_faces"] == 1.0


def test_the_male_gender_logit_gives_male_through_the_real_network(loaded, astronaut):
    import torch

    chip = astronaut.crop((140, 40, 300, 200))  # around the face; no detection needed here
    with torch.no_grad():
        loaded.model.fc.bias[7], loaded.model.fc.bias[8] = 3.0, 0.0
    try:
        [(p_male, p_female)] = loaded.classify([chip])
        out = loaded._verdict((p_male, p_female), {})
    finally:
        with torch.no_grad():
            loaded.model.fc.bias[7], loaded.model.fc.bias[8] = 0.0, 3.0
    assert p_male == pytest.approx(np.exp(3) / (np.exp(3) + 1), rel=1e-4)
    assert out.verdict == "male"


@pytest.mark.realmodel
def test_two_faces_side_by_side_are_filtered_as_several_people(checkpoint_dir, astronaut, cameraman):
    # The astronaut's and the cameraman's heads, 256 px each, side by side: both faces stay
    # above the CNN's smallest size at upsample 0, and the image is small enough to be quick.
    left = np.asarray(astronaut.crop((88, 0, 344, 256)))
    right = np.asarray(cameraman.crop((92, 28, 348, 284)))
    pair = Image.fromarray(np.concatenate([left, right], axis=1))
    out = FairFaceDetector(weights=str(checkpoint_dir), **FAST).predict([pair])[0]
    assert (out.verdict, out.filter_reason) == ("filtered", "several_people")
    assert out.scores["n_faces"] == 2.0


def test_a_changed_several_people_ratio_makes_a_new_version(checkpoint_dir, monkeypatch):
    monkeypatch.setenv("BIASLAB_FAIRFACE_WEIGHTS", str(checkpoint_dir))
    assert FairFaceDetector(several_ratio=0.7).version_id == f"1+{CHECKPOINT_NAME}+several0.7"


def test_without_a_checkpoint_the_message_names_the_file_to_fetch():
    with pytest.raises(
        DetectorUnavailable, match=f"BIASLAB_FAIRFACE_WEIGHTS to the FairFace checkpoint {CHECKPOINT_NAME}"
    ):
        FairFaceDetector().load()
