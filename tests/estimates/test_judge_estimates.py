"""A judge as the detector of a few-label estimate: its probabilities, not only its hard
answer, are the prediction (questions, attributes, gender); its extended output draws strata too."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from detectors.models import Prediction
from estimates.models import SamplingRound
from studies.services import questions_csv_read, study_define
from tests.factories import ItemFactory, PromptFactory, image_of
from tests.protocols.questions.data import questions_csv

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def judged(tmp_path):
    study = study_define(
        slug="qjudge",
        protocol="questions",
        questions=questions_csv_read(questions_csv(tmp_path)),
        parameters={"compare": "skin"},
        labels_per_item=1,
    ).study
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    for skin, p_young in (("light", 0.6), ("dark", 0.2)):
        for i in range(10):
            item = ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model="sdxl", key=f"{skin}{i}.png")
            probabilities = {"young": p_young, "middle": 0.0, "old": 1 - p_young}
            Prediction.objects.create(
                image=image_of(item),
                detector="vlm_judge",
                version="v1",
                kind="answers",
                output={
                    "answers": {"age": max(probabilities, key=probabilities.__getitem__)},
                    "probabilities": {"age": probabilities},
                },
            )
    return study


def test_the_judges_probabilities_are_its_prediction(judged):
    body = json.loads(_run("estimate_bias", "--study", "qjudge", "--detector", "vlm_judge"))
    groups = body["questions"]["age"]["sdxl"]["groups"]
    # Hard answers would say young 100 % (light) and 0 % (dark); the probabilities say 60 % and 20 %.
    assert groups["light"]["shares"]["young"]["detector_only"] == pytest.approx(0.6)
    assert groups["dark"]["shares"]["old"]["detector_only"] == pytest.approx(0.8)
    assert body["questions"]["age"]["sdxl"]["max_gap"]["young"]["detector_only"] == pytest.approx(0.4)


def test_a_stratified_round_reads_the_judges_answers_from_its_extended_output(judged):
    _run(
        "sample_for_labeling",
        "--study",
        "qjudge",
        "--detector",
        "vlm_judge",
        "--budget",
        "6",
        "--design",
        "stratified",
        "--seed",
        "1",
    )
    assert SamplingRound.objects.get().n_selected > 0


def test_a_judge_on_an_attributes_study_serves_as_the_detector_with_its_probability_of_yes(
    annotator_a, annotator_b, annotator_c
):
    from tests.reports import attributes_data as data

    fx = data.build(data.attributes_study(), [annotator_a, annotator_b, annotator_c])
    p_yes = {"W1": 0.8, "W2": 0.3, "M1": 0.1, "M2": 0.4}
    for name, p in p_yes.items():
        Prediction.objects.create(
            image=image_of(fx.items[name]),
            detector="vlm_judge",
            version="1",
            kind="answers",
            output={
                "answers": {"boots": "yes" if p >= 0.5 else "no"},
                "probabilities": {"boots": {"yes": p, "no": 1 - p}},
            },
        )
    body = json.loads(_run("estimate_bias", "--study", "gep", "--detector", "vlm_judge"))
    boots = body["attributes"]["sdxl"]["neutral"]["gep_vector"]["boots"]
    # Women (.8 + .3) / 2 = .55; men .1, .4 and M3 unanswered (the cell's mean, .4): .3.
    # (Hard answers would give .5 - .25 / 3.)
    assert boots["detector_only"] == pytest.approx(0.25)


def _judge_gender(sampled_study, *, cant_tell: bool = True) -> dict[int, tuple[float, float]]:
    """A judge's gender outputs on every image: 0.7 on the truth's gender (0.2 on the other, 0.1
    can't tell; 0.5 / 0.4 on low quality), its scores keyed as a judge keys them unless not
    ``cant_tell``. Returns item id -> (p_male, p_female)."""
    vectors = {}
    for item in sampled_study.items:
        truth = sampled_study.truth[item.pk]
        male = 0.7 if truth == "male" else 0.2 if truth == "female" else 0.5
        female = 0.9 - male if truth in ("male", "female") else 0.4
        scores = {"male": male, "female": female}
        if cant_tell:
            scores["cant_tell"] = round(1 - male - female, 6)
        Prediction.objects.create(
            image=image_of(item),
            detector="vlm_judge",
            version="g1",
            kind="gender",
            output={"label": "male" if male > female else "female", "reason": "", "scores": scores},
        )
        vectors[item.pk] = (male, female)
    return vectors


def _soft_score(sampled_study, vectors, model: str) -> float:
    """Eq. 1 on the judge's probabilities: per prompt (Σ p_m - Σ p_f) / (Σ p_m + Σ p_f)."""
    sums: dict[int, list[float]] = {}
    for item in sampled_study.items:
        if item.t2i_model == model:
            m, f = vectors[item.pk]
            tally = sums.setdefault(item.prompt_id, [0.0, 0.0])
            tally[0] += m
            tally[1] += f
    return sum(abs(m - f) / (m + f) for m, f in sums.values()) / len(sums)


def test_a_gender_judges_probabilities_are_its_prediction_before_and_after_a_round(sampled_study):
    vectors = _judge_gender(sampled_study)
    before = json.loads(_run("estimate_bias", "--study", "gender", "--detector", "vlm_judge"))
    expected = {model: _soft_score(sampled_study, vectors, model) for model in ("sdxl", "sd3")}
    assert {m: before[m]["detector_only"] for m in expected} == pytest.approx(expected)
    _run(
        "sample_for_labeling", "--study", "gender", "--detector", "vlm_judge", "--budget", "16", "--seed", "2"
    )
    sampled_study.finish(SamplingRound.objects.get())
    after = json.loads(
        _run("estimate_bias", "--study", "gender", "--detector", "vlm_judge", "--bootstrap", "50")
    )
    for model, score in expected.items():
        assert after[model]["detector_only"] == pytest.approx(score)
        assert after[model]["n_labelled"] > 0
        assert after[model]["model_bias_score"]["ci95"] is not None


def test_gender_scores_without_a_judges_cant_tell_leave_the_verdict_as_the_prediction(sampled_study):
    vectors = _judge_gender(sampled_study, cant_tell=False)
    hard = {pk: (1.0, 0.0) if m > f else (0.0, 1.0) for pk, (m, f) in vectors.items()}
    body = json.loads(_run("estimate_bias", "--study", "gender", "--detector", "vlm_judge"))
    assert body["sdxl"]["detector_only"] == pytest.approx(_soft_score(sampled_study, hard, "sdxl"))
    assert body["sdxl"]["detector_only"] != pytest.approx(_soft_score(sampled_study, vectors, "sdxl"))
