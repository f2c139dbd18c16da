"""``vlm_judge`` on a tiny random LLaVA built in the test and loaded through the real loading
code: each choice scored by its summed log-likelihood, probabilities, batching, versions, bad
inputs, and ``run_detectors`` end to end on a questions study."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from PIL import Image

from detectors.base import DetectorOptionError, DetectorUnavailable
from detectors.executors.workers import ItemError, Predicted, outputs_predict
from detectors.judges import JudgeQuestion, StudyAsk
from detectors.kinds import answers_of, probabilities_of
from detectors.models import DetectorRun, Prediction
from detectors.plugins.vlm_judge import VlmJudgeDetector
from tests.factories import (
    ImageFactory,
    ItemFactory,
    PromptFactory,
    StudyFactory,
    _store,
    image_of,
    png_bytes,
)

AGE = JudgeQuestion("age", "How old does the person look?", (("young", "Young"), ("old", "Old person")))
MOOD = JudgeQuestion(
    "mood", "How does the person feel?", (("happy", "Happy"), ("sad", "Sad"), ("none", "Neither"))
)
ASK = StudyAsk("answers", (AGE, MOOD))


def _images() -> list[Image.Image]:
    return [
        Image.new("RGB", (40, 30), (200, 10, 10)),
        Image.new("RGB", (20, 50), (10, 200, 10)),
        Image.new("RGB", (16, 16), (10, 10, 200)),
    ]


def _judge(folder: Path, **options) -> VlmJudgeDetector:
    judge = VlmJudgeDetector(model=str(folder), **options)
    judge.questions_bind(ASK)
    judge.ensure_loaded()
    return judge


@pytest.fixture(scope="module")
def judge(tiny_vlm_dir: Path) -> VlmJudgeDetector:
    return _judge(tiny_vlm_dir)


def test_probabilities_sum_to_one_and_the_answer_is_the_most_likely_choice(judge):
    for output in judge.predict(_images()):
        stored = output.as_output()
        loglik = stored["detail"]["loglik"]
        for question in (AGE, MOOD):
            ps = stored["probabilities"][question.key]
            assert set(ps) == {value for value, _text in question.choices}
            assert math.fsum(ps.values()) == pytest.approx(1.0, abs=1e-9)
            assert stored["answers"][question.key] == max(ps, key=ps.__getitem__)
            assert stored["answers"][question.key] == max(
                loglik[question.key], key=loglik[question.key].__getitem__
            )


def test_batched_scoring_equals_one_by_one(judge):
    images = _images()
    asked = [(AGE, MOOD), (MOOD,), (AGE, MOOD)]
    together = judge.predict(images, questions=asked)
    judge.batch_size = 1  # one question per forward pass, one image per call
    try:
        alone = [judge.predict([image], questions=[q])[0] for image, q in zip(images, asked, strict=True)]
    finally:
        judge.batch_size = 8
    for batched, single in zip(together, alone, strict=True):
        expected = single.as_output()["detail"]["loglik"]
        for key, by_value in batched.as_output()["detail"]["loglik"].items():
            for value, ll in by_value.items():
                assert ll == pytest.approx(expected[key][value], abs=1e-5)


def test_a_choice_of_several_tokens_is_scored_over_all_of_them(judge):
    """The tiny tokenizer spells each character: "Old person" is ten tokens. Its score is the
    sum of the ten log-probabilities of a plain forward pass over prompt + answer."""
    import torch

    image = _images()[0]
    assert len(judge.choice_ids("Old person")) == 10
    scored = judge.predict([image], questions=[(AGE,)])[0].as_output()["detail"]["loglik"]["age"]["old"]
    prompt = judge.prompt(AGE)
    inputs = judge.processor(
        text=[prompt + "Old person"], images=[[image.convert("RGB")]], return_tensors="pt"
    )
    n_prompt = judge.processor(text=[prompt], images=[[image.convert("RGB")]], return_tensors="pt")[
        "input_ids"
    ].shape[1]
    with torch.inference_mode():
        logp = judge.model(**inputs).logits[0].log_softmax(dim=-1)
    ids = inputs["input_ids"][0]
    per_token = [float(logp[t - 1, ids[t]]) for t in range(n_prompt, ids.shape[0])]
    assert len(per_token) == 10
    assert scored == pytest.approx(sum(per_token), abs=1e-4)
    assert abs(scored - per_token[0]) > 1e-3


def test_the_prompt_template_and_the_questions_change_the_version(tiny_vlm_dir, tmp_path):
    default = VlmJudgeDetector(model=str(tiny_vlm_dir))
    template = tmp_path / "t.txt"
    template.write_text("Look at the image. {question}\n{choices}", encoding="utf-8")
    other = VlmJudgeDetector(model=str(tiny_vlm_dir), prompt_template=str(template))
    same = VlmJudgeDetector(model=str(tiny_vlm_dir), prompt_template=str(template))
    assert default.version_id.startswith("1+vlm@")
    assert other.version_id != default.version_id
    assert same.version_id == other.version_id
    default.questions_bind(ASK)
    bound = default.version_id
    default.questions_bind(StudyAsk("answers", (AGE,)))
    assert default.version_id != bound
    assert bound.startswith(VlmJudgeDetector(model=str(tiny_vlm_dir)).version_id + "+q")


def test_bad_options_are_refused_before_the_run(tiny_vlm_dir, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("{question} {answer}", encoding="utf-8")
    for options, match in (
        ({"prompt_template": str(bad)}, "not a template of {question} and {choices}"),
        ({"prompt_template": str(tmp_path / "missing.txt")}, "cannot be read"),
        ({"dtype": "int8"}, "dtype must be one of bf16, fp16, fp32"),
        ({"batch_size": 0}, "batch_size must be an integer"),
    ):
        with pytest.raises(DetectorOptionError, match=match):
            VlmJudgeDetector(model=str(tiny_vlm_dir), **options)


def test_missing_weights_name_the_setting(tmp_path):
    for judge, match in (
        (VlmJudgeDetector(), "has no model: set BIASLAB_VLM_WEIGHTS"),
        (VlmJudgeDetector(model=str(tmp_path / "nowhere")), "BIASLAB_VLM_WEIGHTS"),
        (
            VlmJudgeDetector(model="someone/some-vlm"),
            "not in the local Hugging Face cache.*BIASLAB_VLM_WEIGHTS",
        ),
        (VlmJudgeDetector(model=str(tmp_path)), "holds no config.json.*BIASLAB_VLM_WEIGHTS"),
    ):
        with pytest.raises(DetectorUnavailable, match=match):
            _ = judge.version_id  # read first by a run, before anything is written
        with pytest.raises(DetectorUnavailable, match="BIASLAB_VLM_WEIGHTS"):
            judge.ensure_loaded()


def test_the_weights_setting_is_read_when_no_model_option_is_given(tiny_vlm_dir, monkeypatch):
    monkeypatch.setenv("BIASLAB_VLM_WEIGHTS", str(tiny_vlm_dir))
    assert VlmJudgeDetector().version_id == VlmJudgeDetector(model=str(tiny_vlm_dir)).version_id


def _without_template(tiny_vlm_dir: Path, tmp_path: Path) -> Path:
    folder = shutil.copytree(tiny_vlm_dir, tmp_path / "no-template")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    for name in ("processor_config.json", "tokenizer_config.json"):
        path = folder / name
        if path.is_file():
            config = json.loads(path.read_text())
            config.pop("chat_template", None)
            path.write_text(json.dumps(config))
    return folder


def _fixed_size(tiny_vlm_dir: Path, tmp_path: Path) -> Path:
    """A processor that keeps images at their size: the 16 px tower takes 16 px images only."""
    folder = shutil.copytree(tiny_vlm_dir, tmp_path / "fixed-size")
    config_path = folder / "processor_config.json"
    config = json.loads(config_path.read_text())
    config["image_processor"].update(do_resize=False, do_center_crop=False)
    config_path.write_text(json.dumps(config))
    return folder


def test_a_model_folder_without_a_chat_template_is_refused(tiny_vlm_dir, tmp_path):
    with pytest.raises(DetectorUnavailable, match="has no chat template"):
        VlmJudgeDetector(model=str(_without_template(tiny_vlm_dir, tmp_path))).ensure_loaded()


def test_run_detectors_with_a_model_folder_without_a_chat_template_says_so_in_one_line_writing_nothing(
    three_questions, tiny_vlm_dir, tmp_path
):
    folder = _without_template(tiny_vlm_dir, tmp_path)
    with pytest.raises(CommandError) as info:
        call_command(
            "run_detectors", "--detector", "vlm_judge", "--study", "three", "--option", f"model={folder}"
        )
    line = str(info.value)
    assert "\n" not in line
    assert str(folder) in line
    assert "has no chat template" in line
    # No prediction; the attempt is kept as a failed run with the same line, as for any
    # detector that cannot load (detectors.services.detector_run).
    assert not Prediction.objects.exists()
    run = DetectorRun.objects.get()
    assert run.status == "failed"
    assert line == f"vlm_judge is unavailable: {run.error}"


def test_an_image_the_model_cannot_take_fails_alone_with_a_clear_error(tiny_vlm_dir, tmp_path):
    judge = _judge(_fixed_size(tiny_vlm_dir, tmp_path))
    wide, square = _images()[0], _images()[2]
    outcomes = outputs_predict(judge, [wide, square], [(), ()])
    assert isinstance(outcomes[0], ItemError)
    assert outcomes[0].message.startswith("ValueError: the model")
    assert "(40x30)" in outcomes[0].message
    assert isinstance(outcomes[1], Predicted)


def test_run_detectors_stores_answers_and_probabilities_on_a_questions_study(three_questions, tiny_vlm_dir):
    study, every, two = three_questions
    call_command(
        "run_detectors", "--detector", "vlm_judge", "--study", study.slug, "--option", f"model={tiny_vlm_dir}"
    )
    stored = {p.image_id: p for p in Prediction.objects.filter(detector="vlm_judge")}
    assert {p.kind for p in stored.values()} == {"answers"}
    assert {p.status for p in stored.values()} == {"ok"}
    assert sorted(answers_of(stored[image_of(two).pk].output)) == ["age", "mood"]
    assert sorted(probabilities_of(stored[image_of(every).pk].output)) == ["age", "mood", "wealth"]
    version = next(iter(stored.values())).version
    assert "+t" in version
    assert "+q" in version


@pytest.mark.ray
def test_a_ray_run_stores_the_answers_a_local_run_stores(ray_cluster, three_questions, tiny_vlm_dir):
    """The workers are bound to the study's questions as the driver is: same version, same answers."""
    study, _every, _two = three_questions
    args = ("--detector", "vlm_judge", "--study", study.slug, "--option", f"model={tiny_vlm_dir}")

    def stored() -> dict[int, tuple]:
        rows = Prediction.objects.filter(detector="vlm_judge").values_list(
            "image_id", "version", "status", "output"
        )
        return {image: (version, status, output) for image, version, status, output in rows}

    call_command("run_detectors", *args)
    local = stored()
    Prediction.objects.all().delete()
    call_command("run_detectors", *args, "--executor", "ray", "--num-workers", "1", "--batch-size", "2")
    remote = stored()
    assert remote.keys() == local.keys()
    for image, (version, status, output) in local.items():
        assert remote[image][:2] == (version, status)
        assert answers_of(remote[image][2]) == answers_of(output)
        for question, probabilities in probabilities_of(output).items():
            assert probabilities_of(remote[image][2])[question] == pytest.approx(probabilities, abs=1e-6)


def test_run_detectors_stores_an_image_the_model_refuses_as_failed_in_one_line_with_no_answer(
    three_questions, tiny_vlm_dir, tmp_path
):
    study, every, _two = three_questions
    fits = ItemFactory(
        prompt=every.prompt,
        metadata={"skin": "light"},
        image=ImageFactory(_stored=_store(png_bytes(9001, 16)), width=16, height=16),
    )
    folder = _fixed_size(tiny_vlm_dir, tmp_path)
    call_command(
        "run_detectors", "--detector", "vlm_judge", "--study", study.slug, "--option", f"model={folder}"
    )
    stored = {p.image_id: p for p in Prediction.objects.filter(detector="vlm_judge")}
    refused = stored[image_of(every).pk]  # 32 px: the tower takes 16 px only
    assert refused.status == "failed"
    assert refused.output is None or not answers_of(refused.output)
    assert refused.error.startswith("ValueError: the model could not take the image (32x32): ")
    assert "\n" not in refused.error
    assert stored[image_of(fits).pk].status == "ok"
    assert sorted(answers_of(stored[image_of(fits).pk].output)) == ["age", "mood", "wealth"]


def test_run_detectors_on_a_gender_study_stores_gender_verdicts(db, tiny_vlm_dir):
    study = StudyFactory(protocol="gender")
    ItemFactory(prompt=PromptFactory(study=study))
    call_command(
        "run_detectors", "--detector", "vlm_judge", "--study", study.slug, "--option", f"model={tiny_vlm_dir}"
    )
    prediction = Prediction.objects.get(detector="vlm_judge")
    assert prediction.kind == "gender"
    assert set(prediction.output["scores"]) == {"male", "female", "cant_tell"}
    assert math.fsum(prediction.output["scores"].values()) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def qwen_judge(tmp_path_factory: pytest.TempPathFactory) -> VlmJudgeDetector:
    from tests.detectors.tiny_models import save_tiny_qwen2_vl

    return _judge(save_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen") / "qwen"))


def test_an_image_the_processor_refuses_fails_alone_in_one_line_naming_its_size(qwen_judge):
    """Qwen2-VL's processor refuses an aspect ratio over 200."""
    qwen_judge.batch_size = 8
    thin = Image.new("RGB", (500, 2), (200, 10, 10))
    outcomes = outputs_predict(qwen_judge, [thin, _images()[2]], [(), ()])
    assert isinstance(outcomes[0], ItemError)
    assert outcomes[0].message.startswith("ValueError: the model's processor refused the image (500x2): ")
    assert "\n" not in outcomes[0].message
    assert isinstance(outcomes[1], Predicted)


def test_a_model_whose_processor_packs_the_images_scores_batched_as_alone(qwen_judge):
    """Qwen2-VL packs every image's patches into one tensor (no row per image) and places its
    tokens in 3-D: each choice gets its own processed row, and the scores do not move."""
    judge = qwen_judge
    judge.batch_size = 8
    assert type(judge.model).__name__ == "Qwen2VLForConditionalGeneration"
    images = _images()[:2]
    together = judge.predict(images, questions=[(AGE, MOOD), (MOOD,)])
    judge.batch_size = 1
    alone = [
        judge.predict([images[0]], questions=[(AGE, MOOD)])[0],
        judge.predict([images[1]], questions=[(MOOD,)])[0],
    ]
    for batched, single in zip(together, alone, strict=True):
        expected = single.as_output()["detail"]["loglik"]
        for key, by_value in batched.as_output()["detail"]["loglik"].items():
            assert by_value == pytest.approx(expected[key], abs=1e-5)
