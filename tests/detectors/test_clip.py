"""The three CLIP detectors on a tiny random CLIP saved to a temporary folder.

Random weights cannot be steered towards a branch, so the decision rules are driven with
controlled similarities; pre- and post-processing are checked against the model's own forward.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from detectors import registry
from detectors.base import FEMALE, FILTERED, MALE, DetectorUnavailable
from detectors.plugins.clip import (
    FEMALE_TEXT,
    GENDER_TEXTS,
    MALE_TEXT,
    MAN_TEXT,
    OBJECT_TEXT,
    PERSON_TEXT,
    UNCERTAIN_TEXT,
    WOMAN_TEXT,
    ClipDetector,
    ClipProbDetector,
    ClipSimilarities,
    ClipUncertainDetector,
    _dtype_name,
)


def _images(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (40 + 7 * i, 30 + 5 * i), (30 * i % 255, 90, 200 - 20 * i)) for i in range(n)]


def _sims(texts: tuple[str, ...], values: list[list[float]], scale: float = 100.0) -> ClipSimilarities:
    return ClipSimilarities(texts, torch.tensor(values), scale)


def test_clip_scores_match_the_models_own_softmax_over_the_two_texts(tiny_clip: Path):
    from transformers import CLIPModel, CLIPProcessor

    images = _images(3)
    outputs = registry.get("clip").predict(images)

    model = CLIPModel.from_pretrained(tiny_clip).eval()
    processor = CLIPProcessor.from_pretrained(tiny_clip)
    with torch.inference_mode():
        inputs = processor(text=list(GENDER_TEXTS), images=images, return_tensors="pt", padding=True)
        expected = model(**inputs).logits_per_image.softmax(-1)
    for output, row in zip(outputs, expected, strict=True):
        assert output.scores["p_male"] == pytest.approx(float(row[0]), abs=1e-4)
        assert output.scores["p_female"] == pytest.approx(float(row[1]), abs=1e-4)
        higher = MALE if output.scores["sim_male"] >= output.scores["sim_female"] else FEMALE
        assert output.verdict == higher


def test_images_are_encoded_in_batches_without_changing_results(tiny_clip: Path):
    images = _images(5)
    one_by_one = registry.get("clip", batch_size=1).predict(images)
    batched = registry.get("clip", batch_size=4).predict(images)
    assert [o.scores["sim_male"] for o in one_by_one] == pytest.approx(
        [o.scores["sim_male"] for o in batched], abs=1e-5
    )
    assert registry.get("clip").predict([]) == []


def test_text_embeddings_are_computed_once_per_load(tiny_clip: Path, monkeypatch: pytest.MonkeyPatch):
    detector = registry.get("clip")
    detector.ensure_loaded()
    model = detector.encoder._model
    calls = []
    monkeypatch.setattr(model, "get_text_features", lambda **kw: calls.append(kw))
    detector.predict(_images(2))
    detector.predict(_images(2))
    assert calls == []


def test_clip_never_filters_and_the_higher_similarity_wins():
    detector = ClipDetector()
    sims = _sims(GENDER_TEXTS, [[0.30, 0.29], [0.20, 0.31], [0.25, 0.25]])
    assert [detector.decide(sims, row).verdict for row in range(3)] == [MALE, FEMALE, MALE]


def test_clip_prob_keeps_confident_and_filters_unconfident_images():
    detector = ClipProbDetector(face_method="hog")
    # logit scale 100: a 0.03 gap → p = 0.95; a 0.01 gap → p = 0.73.
    sims = _sims(GENDER_TEXTS, [[0.20, 0.23], [0.24, 0.23]])
    confident = detector.decide(sims, 0)
    assert confident.verdict == FEMALE
    assert confident.scores["p_female"] == pytest.approx(0.9526, abs=1e-3)
    unsure = detector.decide(sims, 1)
    assert unsure.verdict == FILTERED
    assert unsure.filter_reason == "low_confidence"
    assert unsure.scores["p_male"] == pytest.approx(0.7311, abs=1e-3)


def test_clip_prob_filters_faceless_images_before_clip_sees_them(
    tiny_clip: Path, astronaut, cat, monkeypatch: pytest.MonkeyPatch
):
    detector = ClipProbDetector(face_method="hog")
    detector.ensure_loaded()
    seen: list[int] = []

    def similarities(images):
        seen.append(len(images))
        return _sims(GENDER_TEXTS, [[0.30, 0.10]] * len(images))

    monkeypatch.setattr(detector.encoder, "similarities", similarities)
    outputs = detector.predict([cat, astronaut, cat])
    assert seen == [1]
    assert [o.filter_reason for o in outputs] == ["no_face", "", "no_face"]
    assert outputs[1].verdict == MALE  # controlled similarities, not a claim about the photo
    assert outputs[1].scores["n_faces"] == 1


def test_clip_uncertain_filters_objects_then_uncertain_answers():
    detector = ClipUncertainDetector()
    texts = (PERSON_TEXT, OBJECT_TEXT, MAN_TEXT, WOMAN_TEXT, UNCERTAIN_TEXT)
    sims = _sims(
        texts,
        [
            [0.20, 0.21, 0.30, 0.10, 0.10],  # more object than person
            [0.25, 0.20, 0.20, 0.21, 0.24],  # a person, uncertain gender wins
            [0.25, 0.20, 0.30, 0.21, 0.24],  # looks like a man
            [0.25, 0.20, 0.20, 0.31, 0.24],  # looks like a woman
        ],
    )
    outputs = [detector.decide(sims, row) for row in range(4)]
    assert [o.filter_reason for o in outputs] == ["not_a_person", "uncertain", "", ""]
    assert [o.verdict for o in outputs[2:]] == [MALE, FEMALE]
    assert outputs[1].scores["p_uncertain"] > 0.5
    assert set(outputs[0].scores) >= {"sim_person", "sim_object", "sim_man", "sim_woman", "sim_uncertain"}


def test_clip_uncertain_uses_the_papers_five_texts_in_one_encoding(tiny_clip: Path):
    detector = registry.get("clip_uncertain")
    assert detector.encoder.texts == (PERSON_TEXT, OBJECT_TEXT, MAN_TEXT, WOMAN_TEXT, UNCERTAIN_TEXT)
    outputs = detector.predict(_images(2))
    assert len(outputs) == 2
    assert all(
        o.verdict in (MALE, FEMALE) or o.filter_reason in ("not_a_person", "uncertain") for o in outputs
    )


@pytest.mark.parametrize("key", ["clip", "clip_prob", "clip_uncertain"])
def test_missing_weights_fail_on_load_naming_the_variable(key: str):
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS"):
        registry.get(key).ensure_loaded()


def test_folder_that_is_not_a_clip_model_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "config.json").write_text('{"model_type": "clip"}')
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(tmp_path))
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS"):
        registry.get("clip").ensure_loaded()


def test_version_id_names_the_weights_and_the_face_gate(tiny_clip: Path):
    assert registry.get("clip").version_id == f"1+{tiny_clip.name}"
    assert "dlib-cnn" in registry.get("clip_prob").version_id
    assert "p0.9" in registry.get("clip_prob").version_id


def test_half_precision_only_on_cuda():
    assert _dtype_name("cpu", "bf16") == "float32"
    assert _dtype_name("cuda", "") == "bfloat16"
    assert _dtype_name("cuda:1", "fp16") == "float16"
    with pytest.raises(ValueError, match="dtype"):
        _dtype_name("cuda", "int8")


def test_texts_are_the_papers():
    assert (MALE_TEXT, FEMALE_TEXT) == ("a photo of a male", "a photo of a female")
    assert UNCERTAIN_TEXT == "A photo of a person with an uncertain gender"


def test_missing_default_weights_fail_fast_even_without_the_offline_switch(monkeypatch: pytest.MonkeyPatch):
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE")
    started = time.monotonic()
    with pytest.raises(DetectorUnavailable, match="not in the local Hugging Face cache"):
        registry.get("clip").ensure_loaded()
    assert time.monotonic() - started < 5


def test_encoder_used_before_load_says_so():
    with pytest.raises(RuntimeError, match="load"):
        ClipDetector().encoder.similarities(_images(1))


def test_saved_model_whose_tokenizer_cannot_spell_the_prompts_is_refused(
    tiny_clip_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import shutil

    from tests.detectors.tiny_models import save_tiny_tokenizer

    broken = tmp_path / "clip"
    shutil.copytree(tiny_clip_dir, broken)
    save_tiny_tokenizer(broken, "aphotf")  # knows "a photo of", not "male"
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(broken))
    with pytest.raises(DetectorUnavailable, match=r"cannot spell 'a photo of a male'.*BIASLAB_CLIP_WEIGHTS"):
        registry.get("clip").ensure_loaded()
