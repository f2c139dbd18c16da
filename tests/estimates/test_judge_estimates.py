"""A judge as the detector of a few-label estimate: its probabilities, not only its hard
answer, are the prediction (questions, attributes, gender); its extended output draws strata too."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from detectors.models import Prediction
from estimates.models import SamplingRound
from tests.factories import FinalLabelFactory, ItemFactory, image_of
from tests.protocols.questions.data import define_questions_study

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def judged(tmp_path):
    study, prompt = define_questions_study(tmp_path, slug="qjudge", labels_per_item=1)
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


def _attributes_judged() -> tuple[object, dict[int, str]]:
    """An attributes study of 40 images that a judge answered: p(yes) 0.9 to every attribute of
    20 of them (wrongly on every other one), 0.1 to the 20 others (always rightly)."""
    from tests.reports.attributes_data import attributes_study, gep_item

    study = attributes_study()
    truth: dict[int, str] = {}
    for i in range(40):
        says_yes = i < 20
        item = gep_item(study, "sdxl", "woman" if i % 2 else "man", "neutral", context=f"c{i}")
        p = 0.9 if says_yes else 0.1
        keys = list(study.questions.values_list("key", flat=True))
        Prediction.objects.create(
            image=image_of(item),
            detector="vlm_judge",
            version="a1",
            kind="answers",
            output={
                "answers": {k: "yes" if says_yes else "no" for k in keys},
                "probabilities": {k: {"yes": p, "no": 1 - p} for k in keys},
            },
        )
        truth[item.pk] = "yes" if says_yes and i % 4 < 2 else "no"
    return study, truth


def test_sample_for_labeling_draws_rounds_for_a_judge_on_an_attributes_study(db):
    from protocols.attributes.estimates import attribute_output_codes
    from studies.models import Item, Question

    study, truth = _attributes_judged()
    said = _run(
        "sample_for_labeling", "--study", "gep", "--detector", "vlm_judge", "--budget", "16", "--seed", "4"
    )
    assert said.startswith("Round 1 of 'gep' (vlm_judge@a1, uniform")
    first = SamplingRound.objects.get()
    questions = list(Question.objects.filter(study=study))
    for item in Item.objects.filter(pk__in=first.round_items.filter(selected=True).values("item_id")):
        for question in questions:
            FinalLabelFactory(item=item, question=question, value=truth[item.pk])
    _run(
        "sample_for_labeling", "--study", "gep", "--detector", "vlm_judge", "--budget", "6",
        "--design", "active", "--seed", "5",
    )  # fmt: skip
    second = SamplingRound.objects.get(number=2)
    pool = {i: p for i, p in second.round_items.values_list("item_id", "pi") if 0 < p < 1}
    codes = attribute_output_codes(study, "vlm_judge", "a1")
    erring = [p for i, p in pool.items() if codes[i] == 3]
    right = [p for i, p in pool.items() if codes[i] == 0]
    assert erring
    assert right
    assert min(erring) > max(right) > 0
    body = json.loads(_run("estimate_bias", "--study", "gep", "--detector", "vlm_judge"))
    assert body["attributes"]["sdxl"]["neutral"]["n_labelled"] > 0


def test_the_estimate_page_and_api_accept_a_judge_on_an_attributes_study(db):
    from estimates.services import estimate_request

    study, _ = _attributes_judged()
    asked = estimate_request(study=study, detector="vlm_judge", n_boot=0, seed=0, history=False)
    assert asked.kept is not None
    assert asked.kept.report.as_json()["version"] == "a1"


def test_sample_for_labeling_names_a_judges_answers_among_what_an_attributes_study_reads(db):
    from django.core.management.base import CommandError

    _attributes_judged()
    with pytest.raises(CommandError) as error:
        _run("sample_for_labeling", "--study", "gep", "--detector", "clip", "--budget", "4")
    assert str(error.value) == (
        "--detector: 'clip' has no attributes (or a judge's answers) predictions in study 'gep' (run "
        "run_detectors first; detectors with predictions: vlm_judge)"
    )
