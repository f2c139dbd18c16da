"""The GEP attribute estimators C, CC and CLS (Zhang et al. 2023, section 4) on the tiny random CLIP.

Random weights say nothing about dresses, so the tests check the arithmetic against independent
computations: C against the model's own forward pass, CC against C and the reference cosine,
CLS against scikit-learn classifiers trained here by hand on the same embeddings.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from django.core.management import call_command
from PIL import Image

from detectors import registry
from detectors.base import DetectorOptionError, DetectorUnavailable
from detectors.kinds import OutputInvalid, output_validate, validate_attributes
from detectors.plugins.clip_attributes import CLS_NEGATIVES, CLS_POSITIVES, CLS_TEXTS, SIMILARITY_TEXTS
from metrics.gep_design import ATTRIBUTE_KEYS

ESTIMATORS = ("clip_attr", "clip_attr_calibrated", "clip_attr_cls")


def _images(n: int) -> list[Image.Image]:
    return [Image.new("RGB", (40 + 7 * i, 30 + 5 * i), (30 * i % 255, 90, 200 - 20 * i)) for i in range(n)]


def _scores(detector_key: str, images: list[Image.Image], **options: object) -> list[dict[str, float]]:
    return [o.as_output()["scores"] for o in registry.get(detector_key, **options).predict(images)]


# --- every estimator -----------------------------------------------------------------------------
@pytest.mark.parametrize("key", ESTIMATORS)
def test_each_estimator_gives_a_finite_score_per_attribute_key_deterministically(tiny_clip: Path, key: str):
    images = _images(3)
    detector = registry.get(key, seeds=2) if key == "clip_attr_cls" else registry.get(key)
    outputs = detector.predict(images)
    assert len(outputs) == 3
    assert all(o.kind == "attributes" for o in outputs)
    for output in outputs:
        scores = output.as_output()["scores"]
        assert list(scores) == list(ATTRIBUTE_KEYS)
        assert all(math.isfinite(s) for s in scores.values())
    # A fresh instance loads, embeds (and trains) again and says exactly the same.
    again = registry.get(key, seeds=2) if key == "clip_attr_cls" else registry.get(key)
    assert [o.as_output() for o in again.predict(images)] == [o.as_output() for o in outputs]


@pytest.mark.parametrize("key", ESTIMATORS)
def test_images_are_encoded_in_batches_without_changing_scores(tiny_clip: Path, key: str):
    images = _images(5)
    # One detector (the CLS classifiers are trained once), its encoder's batch size changed.
    detector = registry.get(key, batch_size=1, **({"seeds": 2} if key == "clip_attr_cls" else {}))
    one_by_one = [o.as_output()["scores"] for o in detector.predict(images)]
    assert detector.encoder.batch_size == 1
    detector.encoder.batch_size = 4
    batched = [o.as_output()["scores"] for o in detector.predict(images)]
    for single, batch in zip(one_by_one, batched, strict=True):
        assert list(single.values()) == pytest.approx(list(batch.values()), abs=1e-5)
    assert registry.get(key).predict([]) == []


@pytest.mark.parametrize("key", ESTIMATORS)
def test_missing_weights_fail_on_load_naming_the_variable(key: str):
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS"):
        registry.get(key).ensure_loaded()


def test_a_tokenizer_that_cannot_spell_the_training_texts_is_refused(
    tiny_clip_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import shutil

    from tests.detectors.tiny_models import save_tiny_tokenizer

    broken = tmp_path / "clip"
    shutil.copytree(tiny_clip_dir, broken)
    save_tiny_tokenizer(broken, "abcdefghijlmnopqrstuvwxyz.")  # every letter but k
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(broken))
    with pytest.raises(
        DetectorUnavailable, match=r"cannot spell 'A man standing on a skateboard\.'.*BIASLAB_CLIP_WEIGHTS"
    ):
        registry.get("clip_attr_cls").ensure_loaded()


def test_versions_name_the_weights_and_the_classifier_settings(tiny_clip: Path):
    assert registry.get("clip_attr").version_id == f"1+{tiny_clip.name}"
    assert registry.get("clip_attr_calibrated").version_id == f"1+{tiny_clip.name}"
    assert registry.get("clip_attr_cls").version_id == f"1+{tiny_clip.name}+seeds10"
    assert registry.get("clip_attr_cls", seeds=5).version_id == f"1+{tiny_clip.name}+seeds5"
    assert registry.get("clip_attr_cls", alpha=0.001).version_id == f"1+{tiny_clip.name}+seeds10+alpha0.001"
    # Batch size and half precision do not enter the version (as for the gender CLIP detectors).
    assert registry.get("clip_attr_cls", batch_size=4).version_id == f"1+{tiny_clip.name}+seeds10"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seeds": 0}, "clip_attr_cls's option seeds must be an integer ≥ 1, got 0"),
        ({"seeds": 2.5}, "clip_attr_cls's option seeds must be an integer ≥ 1, got 2.5"),
        ({"alpha": 0}, "clip_attr_cls's option alpha must be a number > 0, got 0.0"),
        ({"alpha": "much"}, "clip_attr_cls's option alpha must be a number ≥ 0, got 'much'"),
    ],
)
def test_unusable_classifier_options_are_refused_before_loading(options: dict, message: str):
    with pytest.raises(DetectorOptionError, match="^" + message.replace(".", r"\.")):
        registry.get("clip_attr_cls", **options)


def test_the_similarity_estimators_take_no_classifier_options():
    with pytest.raises(DetectorOptionError, match=r"clip_attr does not take the option\(s\) seeds"):
        registry.get("clip_attr", seeds=3)


# --- the texts -----------------------------------------------------------------------------------
def test_c_and_cc_embed_the_attribute_without_its_preposition_then_the_reference():
    assert SIMILARITY_TEXTS[:6] == ("boots", "slippers", "jeans", "shorts", "slacks", "a dress")
    assert SIMILARITY_TEXTS[9] == "uniform"
    assert SIMILARITY_TEXTS[12:15] == ("a tie", "a mask", "gloves")
    assert SIMILARITY_TEXTS[-1] == "an object"
    assert len(SIMILARITY_TEXTS) == len(ATTRIBUTE_KEYS) + 1


def test_cls_trains_each_attribute_on_48_positive_and_48_shared_negative_texts():
    assert len(CLS_NEGATIVES) == 48
    assert all(len(CLS_POSITIVES[key]) == 48 for key in ATTRIBUTE_KEYS)
    assert "A person sitting at a table." in CLS_NEGATIVES
    assert "A woman in a dress riding a horse." in CLS_POSITIVES["dress"]
    assert "A man with gloves running on the beach." in CLS_POSITIVES["gloves"]
    # Each distinct text is embedded once: 48 negatives + 15 x 48 positives.
    assert len(CLS_TEXTS) == len(set(CLS_TEXTS)) == 48 + 15 * 48


# --- C and CC ------------------------------------------------------------------------------------
def test_clip_attr_is_the_cosine_the_models_own_forward_pass_gives(tiny_clip: Path):
    from transformers import CLIPModel, CLIPProcessor

    images = _images(3)
    scores = _scores("clip_attr", images)
    model = CLIPModel.from_pretrained(tiny_clip).eval()
    processor = CLIPProcessor.from_pretrained(tiny_clip)
    texts = list(SIMILARITY_TEXTS[:-1])
    with torch.inference_mode():
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True)
        cosine = model(**inputs).logits_per_image / model.logit_scale.exp()
    for row, by_key in zip(cosine.tolist(), scores, strict=True):
        assert [by_key[key] for key in ATTRIBUTE_KEYS] == pytest.approx(row, abs=1e-5)


def test_calibrated_is_c_minus_the_cosine_with_an_object_exactly(tiny_clip: Path):
    images = _images(4)
    c_scores = _scores("clip_attr", images)
    calibrated = registry.get("clip_attr_calibrated")
    cc_scores = [o.as_output()["scores"] for o in calibrated.predict(images)]
    reference = calibrated.encoder.similarities(images).column("an object").tolist()
    for c, cc, ref in zip(c_scores, cc_scores, reference, strict=True):
        assert ref != 0
        assert cc == {key: c[key] - ref for key in ATTRIBUTE_KEYS}


def test_text_embeddings_are_computed_once_per_load(tiny_clip: Path, monkeypatch: pytest.MonkeyPatch):
    detectors = [
        registry.get(key, seeds=1) if key == "clip_attr_cls" else registry.get(key) for key in ESTIMATORS
    ]
    calls: list[object] = []
    for detector in detectors:
        detector.ensure_loaded()
        monkeypatch.setattr(detector.encoder._model, "get_text_features", lambda **kw: calls.append(kw))
    monkeypatch.setattr("detectors.plugins.clip_attributes.sgd_classifier", lambda *a, **kw: calls.append(a))
    for detector in detectors:
        detector.predict(_images(2))
        detector.predict(_images(2))
    assert calls == []


# --- CLS -----------------------------------------------------------------------------------------
def _by_hand(detector, images: list[Image.Image], seeds: list[int]) -> dict[str, np.ndarray]:
    """Per key, the mean over seeds of SGDClassifier P(yes), trained here on the detector's embeddings."""
    from sklearn.linear_model import SGDClassifier

    texts = detector.encoder.texts
    text_embeddings = detector.encoder.text_embeddings.double().numpy()
    image_embeddings = detector.encoder.image_embeddings(images).double().numpy()
    assert np.allclose(np.linalg.norm(text_embeddings, axis=1), 1)
    assert np.allclose(np.linalg.norm(image_embeddings, axis=1), 1)
    negatives = text_embeddings[[texts.index(t) for t in CLS_NEGATIVES]]
    expected = {}
    for key in ATTRIBUTE_KEYS:
        positives = text_embeddings[[texts.index(t) for t in CLS_POSITIVES[key]]]
        x = np.vstack([negatives, positives])
        y = np.array([0] * 48 + [1] * 48)
        per_seed = [
            SGDClassifier(
                loss="log_loss",
                max_iter=5000,
                tol=1e-3,
                early_stopping=True,
                validation_fraction=0.1,
                n_iter_no_change=5,
                alpha=1e-4,
                random_state=seed,
            )
            .fit(x, y)
            .predict_proba(image_embeddings)[:, 1]
            for seed in seeds
        ]
        expected[key] = np.mean(per_seed, axis=0)
        if key == "tie":
            # The seeds give different classifiers: an ensemble, not copies of one.
            assert not np.allclose(per_seed[0], per_seed[1])
    return expected


def test_cls_is_the_mean_probability_of_sklearn_classifiers_over_the_seeds(tiny_clip: Path):
    images = _images(4)
    detector = registry.get("clip_attr_cls", seeds=3)
    outputs = [o.as_output() for o in detector.predict(images)]
    expected = _by_hand(detector, images, [0, 1, 2])
    for row, output in enumerate(outputs):
        for key in ATTRIBUTE_KEYS:
            assert 0.0 <= output["scores"][key] <= 1.0
            assert output["scores"][key] == pytest.approx(float(expected[key][row]), abs=1e-12)


def test_cls_records_its_seeds_penalty_and_training_texts_in_each_prediction(tiny_clip: Path):
    outputs = registry.get("clip_attr_cls", seeds=2, alpha=0.001).predict(_images(2))
    for output in outputs:
        assert output.as_output()["meta"] == {
            "seeds": [0, 1],
            "alpha": 0.001,
            "n_training_texts": {"positive": 48, "negative": 48},
        }


def test_cls_defaults_to_the_papers_ten_seeds_and_sklearns_penalty():
    detector = registry.get("clip_attr_cls")
    assert detector.seeds == tuple(range(10))
    assert detector.meta["seeds"] == list(range(10))
    assert detector.meta["alpha"] == 1e-4


# --- the attributes kind's meta ------------------------------------------------------------------
def test_an_attributes_output_may_carry_a_meta_object():
    output = {"scores": {"tie": 0.5}, "meta": {"seeds": [0, 1], "alpha": 1e-4, "note": "x", "ok": True}}
    assert validate_attributes(output) == output
    assert validate_attributes({"scores": {"tie": 1}, "meta": {}}) == {"scores": {"tie": 1.0}}


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (None, "meta: must be a JSON object, got null"),
        ([0, 1], "meta: must be a JSON object, got a list"),
        ({"seeds": [0, math.nan]}, "meta.seeds[1]: must be a finite number"),
        ({"n": {"inner": math.inf}}, "meta.n.inner: must be a finite number"),
        ({"when": object()}, "meta.when: must be a JSON value, got object"),
        ({"n": {1: "a"}}, "meta.n: keys must be strings"),
    ],
)
def test_a_meta_that_is_not_plain_json_is_named(meta: object, message: str):
    with pytest.raises(OutputInvalid, match="^" + message.replace("[", r"\[")):
        validate_attributes({"scores": {}, "meta": meta})


def test_other_unknown_attributes_fields_are_still_refused():
    with pytest.raises(OutputInvalid, match=r"^detail: unknown field \(allowed: scores, meta\)"):
        validate_attributes({"scores": {}, "detail": "x"})


# --- end to end ----------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("key", ESTIMATORS)
def test_run_detectors_stores_valid_attributes_predictions_for_an_attributes_study(tiny_clip: Path, key: str):
    from detectors.models import DetectorRun, Prediction, PredictionStatus, RunStatus
    from tests.factories import ItemFactory, PromptFactory, StudyFactory, image_of

    study = StudyFactory(protocol="attributes", slug="gep")
    assert set(study.questions.values_list("key", flat=True)) == set(ATTRIBUTE_KEYS)
    prompt = PromptFactory(
        study=study, category="neutral", word="riding a bike", text="A woman riding a bike."
    )
    files = [image_of(ItemFactory(prompt=prompt)) for _ in range(3)]
    options = ["--option", "seeds=2"] if key == "clip_attr_cls" else []
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "run_detectors",
        "--detector",
        key,
        "--study",
        "gep",
        "--batch-size",
        "2",
        *options,
        stdout=out,
        stderr=err,
    )
    assert DetectorRun.objects.get().status == RunStatus.FINISHED
    predictions = Prediction.objects.filter(detector=key)
    assert sorted(p.image_id for p in predictions) == sorted(f.pk for f in files)
    expected_version = registry.get(key, **({"seeds": 2} if key == "clip_attr_cls" else {})).version_id
    for prediction in predictions:
        assert (prediction.kind, prediction.status, prediction.version) == (
            "attributes",
            PredictionStatus.OK,
            expected_version,
        )
        assert output_validate("attributes", prediction.output) == prediction.output
        # A set: PostgreSQL's jsonb keeps an object's keys in its own order, not the writer's.
        assert sorted(prediction.output["scores"]) == sorted(ATTRIBUTE_KEYS)
        assert ("meta" in prediction.output) == (key == "clip_attr_cls")
    # Run again: everything is stored for this version, nothing to do.
    call_command("run_detectors", "--detector", key, "--study", "gep", *options, stdout=out, stderr=err)
    assert Prediction.objects.filter(detector=key).count() == 3
