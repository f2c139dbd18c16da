"""The attributes (GEP) protocol's few-label estimate: sampling rounds, the
``estimate_bias`` JSON / CSV / Markdown, the census case and the registry's refusals."""

from __future__ import annotations

import io
import json
from functools import partial

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from estimates import estimands
from estimates.models import SamplingRound
from studies.models import Item, Question
from tests.estimates.conftest import estimate_after_an_api_round, estimate_page_after_a_round, finish_answers
from tests.factories import FinalLabelFactory, StudyFactory
from tests.reports.attributes_data import attributes_study, gep_item

pytestmark = pytest.mark.django_db

ESTIMAND_KEYS = {"estimate", "ci95", "human_only", "detector_only", "lambda", "effective_labels"}


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _truth(i: int, key: str, gender: str) -> str:
    # Women say yes to dress 3 times in 4, men once in 4; boots and tie balanced.
    if key == "dress":
        return "yes" if (i % 4 != 0) == (gender == "woman") else "no"
    return "yes" if i % 2 else "no"


@pytest.fixture
def gep_study():
    study = attributes_study()
    truth: dict[int, dict[str, str]] = {}
    for gender in ("woman", "man"):
        for i in range(20):
            answers = {key: _truth(i, key, gender) for key in ("boots", "dress", "tie")}
            scores = {key: (0.9 if answers[key] == "yes" else 0.1) for key in answers}
            item = gep_item(study, "sdxl", gender, "neutral", scores={"clip": scores}, context=f"c{i}")
            truth[item.pk] = answers
    return study, truth


def test_an_attributes_study_gets_a_sampling_round_and_an_estimate_in_the_contract_shape(gep_study):
    study, truth = gep_study
    _run("sample_for_labeling", "--study", "gep", "--detector", "clip", "--budget", "12", "--seed", "3")
    sampling_round = SamplingRound.objects.get()
    assert sampling_round.n_selected > 0
    finish_answers(study, truth, sampling_round)
    out, _ = _run("estimate_bias", "--study", "gep", "--detector", "clip", "--format", "json")
    body = json.loads(out)
    cell = body["attributes"]["sdxl"]["neutral"]
    assert set(cell) == {"gep_score", "gep_vector", "n_items", "n_labelled"}
    assert (cell["n_items"], cell["n_labelled"]) == (40, sampling_round.n_selected)
    assert set(cell["gep_score"]) == ESTIMAND_KEYS
    assert set(cell["gep_vector"]) == {"boots", "dress", "tie"}
    dress = cell["gep_vector"]["dress"]
    assert set(dress["human_only"]) == {"estimate", "ci95"}
    # The detector is perfect on this study: λ near 1 and the interval holds the truth, 0.5.
    assert dress["lambda"] > 0.5
    assert dress["ci95"][0] <= 0.5 <= dress["ci95"][1]
    assert dress["detector_only"] == pytest.approx(0.9 * 0.75 + 0.1 * 0.25 - (0.9 * 0.25 + 0.1 * 0.75))
    assert body["rounds"] == [1]


def test_every_item_labelled_without_a_round_is_a_census_with_the_exact_human_numbers(gep_study):
    study, truth = gep_study
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    for item_id, answers in truth.items():
        for key, value in answers.items():
            FinalLabelFactory(item=Item.objects.get(pk=item_id), question=questions[key], value=value)
    body = json.loads(_run("estimate_bias", "--study", "gep", "--detector", "clip")[0])
    cell = body["attributes"]["sdxl"]["neutral"]
    # Human: boots 0, dress 0.75 - 0.25 = 0.5, tie 0: GEP score 0.5/3.
    assert cell["gep_vector"]["dress"]["estimate"] == pytest.approx(0.5)
    assert cell["gep_vector"]["dress"]["ci95"] == pytest.approx([0.5, 0.5])
    assert cell["gep_score"]["estimate"] == pytest.approx(0.5 / 3)
    assert cell["gep_score"]["ci95"] == pytest.approx([0.5 / 3, 0.5 / 3])


def test_before_any_round_the_estimates_are_null_with_a_warning(gep_study):
    body = json.loads(_run("estimate_bias", "--study", "gep", "--detector", "clip")[0])
    score = body["attributes"]["sdxl"]["neutral"]["gep_score"]
    assert score["estimate"] is None
    assert score["detector_only"] == pytest.approx(0.4 / 3)  # dress: 0.7 - 0.3; boots, tie 0
    assert "No complete sampling round" in body["warnings"][0]


def test_a_pending_round_is_reported_and_blocks_the_next(gep_study):
    _run("sample_for_labeling", "--study", "gep", "--detector", "clip", "--budget", "8", "--seed", "1")
    _, err = _run("estimate_bias", "--study", "gep", "--detector", "clip")
    assert "Round 1 is pending" in err
    with pytest.raises(CommandError, match="--budget: round 1"):
        _run("sample_for_labeling", "--study", "gep", "--detector", "clip", "--budget", "8")


def test_markdown_and_csv_list_the_score_and_every_entry(gep_study):
    study, truth = gep_study
    _run("sample_for_labeling", "--study", "gep", "--detector", "clip", "--budget", "12", "--seed", "2")
    finish_answers(study, truth, SamplingRound.objects.get())
    csv_text, _ = _run("estimate_bias", "--study", "gep", "--detector", "clip", "--format", "csv")
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("t2i_model,setting,estimand,estimate,ci95")
    assert [line.split(",")[2] for line in lines[1:]] == ["gep_score", "boots", "dress", "tie"]
    md, _ = _run("estimate_bias", "--study", "gep", "--detector", "clip", "--format", "md")
    assert "| sdxl | neutral | gep_score |" in md


def test_an_attributes_active_round_needs_an_earlier_one(gep_study):
    with pytest.raises(CommandError, match=r"--design: active needs the labels of an earlier round"):
        _run(
            "sample_for_labeling",
            "--study",
            "gep",
            "--detector",
            "clip",
            "--budget",
            "5",
            "--design",
            "active",
        )


def test_a_detector_without_attributes_predictions_is_named(gep_study):
    with pytest.raises(CommandError, match="--detector: detector 'fake' has no attributes predictions"):
        _run("estimate_bias", "--study", "gep", "--detector", "fake")


def test_a_protocol_without_a_registered_estimate_is_refused_with_the_known_ones(monkeypatch):
    # Every protocol has its estimate: unregister one to see the refusal.
    monkeypatch.delitem(estimands.ESTIMANDS, "objects")
    StudyFactory(slug="boxes", protocol="objects")
    with pytest.raises(
        CommandError, match="few-label estimates exist for attributes, gender, pair_change, questions studies"
    ):
        _run("estimate_bias", "--study", "boxes", "--detector", "x")
    with pytest.raises(
        CommandError, match="few-label estimates exist for attributes, gender, pair_change, questions"
    ):
        _run("sample_for_labeling", "--study", "boxes", "--detector", "x", "--budget", "3")


def test_the_estimates_registry_is_read_from_the_protocols_specs():
    assert dict(estimands.ESTIMANDS) == {
        key: f"protocols.{key}.estimates"
        for key in ("gender", "attributes", "pair_change", "objects", "questions")
    }


def test_a_registered_module_is_asked_for_its_estimate_by_protocol_key(monkeypatch):
    monkeypatch.setitem(estimands.ESTIMANDS, "questions", "protocols.attributes.estimates")
    # The module's ESTIMAND is the attributes one: a registration that points at the wrong
    # module is refused, not silently used for another protocol.
    with pytest.raises(TypeError, match="not the few-label estimate of protocol 'questions'"):
        estimands.for_protocol("questions")
    assert estimands.for_protocol("no-such-protocol") is None


def test_the_api_draws_an_attributes_round_and_returns_its_estimate(gep_study, researcher, api_for):
    study, truth = gep_study
    body = estimate_after_an_api_round(
        api_for(researcher), partial(finish_answers, study, truth), study="gep", detector="clip"
    )
    assert set(body["attributes"]["sdxl"]["neutral"]["gep_score"]) == ESTIMAND_KEYS
    assert "models" not in body


def test_the_page_shows_an_attributes_estimate_and_label_n_more_draws_its_round(
    gep_study, client_for, researcher
):
    study, truth = gep_study
    page = estimate_page_after_a_round(
        client_for(researcher), partial(finish_answers, study, truth), "/reports/estimate/?study=gep"
    )
    assert "GEP estimated from clip@1 and sampled labels" in page
    assert "gep_score" in page
    assert "Label N more" in page
