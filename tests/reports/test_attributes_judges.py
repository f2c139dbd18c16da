"""A VLM judge on an attributes study: its GEP (the people's computed on its yes / no answers)
beside the people's with the errors, and each attribute item by item against the final answers
(n, accuracy, κ, confusion, Brier, ECE), checked by hand and against scikit-learn."""

from __future__ import annotations

import pytest
from sklearn.metrics import brier_score_loss, cohen_kappa_score

from detectors.models import Prediction
from reports.analyses import analysis_of
from reports.selectors import Scope
from tests.factories import image_of
from tests.reports import attributes_data as data

#: vlm_judge@1's P(yes) for boots, dress, tie on the sdxl neutral items (its answer: >= .5).
JUDGE = {"W1": (0.8, 0.9, 0.6), "W2": (0.3, 0.7, 0.2), "M1": (0.1, 0.4, 0.9), "M2": (0.4, 0.1, 0.2)}


@pytest.fixture
def report(db, annotator_a, annotator_b, annotator_c):
    fx = data.build(data.attributes_study(), [annotator_a, annotator_b, annotator_c])
    for name, p_yes in JUDGE.items():
        Prediction.objects.create(
            image=image_of(fx.items[name]),
            detector="vlm_judge",
            version="1",
            kind="answers",
            output={
                "answers": {k: "yes" if p >= 0.5 else "no" for k, p in zip(data.KEYS, p_yes, strict=True)},
                "probabilities": {k: {"yes": p, "no": 1 - p} for k, p in zip(data.KEYS, p_yes, strict=True)},
            },
        )
    return analysis_of(fx.study).build(Scope(fx.study))


def test_the_judges_gep_lies_beside_the_peoples_with_its_errors(report):
    cell = report["attributes"]["sdxl"]["neutral"]
    judge = cell["judges"]["vlm_judge@1"]
    # Judge: woman boots 1/2, dress 1, tie 1/2; man boots 0, dress 0, tie 1/2.
    assert judge["gep_vector"] == pytest.approx({"boots": 0.5, "dress": 1.0, "tie": 0.0})
    assert judge["gep_score"] == pytest.approx(0.5)
    # People: (0, +1, -1/2), GEP 1/2.
    assert judge["gep_vector_error"] == pytest.approx({"boots": 0.5, "dress": 0.0, "tie": 0.5})
    assert judge["gep_score_error"] == pytest.approx(0.0)
    assert judge["n_without_answer"]["man"]["boots"] == 1  # M3: the judge did not see it
    assert report["attributes"]["sd3"]["neutral"]["judges"] == {}  # it answered no sd3 image


def test_each_attribute_is_measured_item_by_item_against_the_final_answers(report):
    boots = report["judges"]["vlm_judge@1"]["boots"]
    truth = ["yes", "no", "no", "yes"]  # W1, W2, M1, M2
    p_yes = [JUDGE[n][0] for n in ("W1", "W2", "M1", "M2")]
    said = ["yes" if p >= 0.5 else "no" for p in p_yes]
    assert boots["n"] == 4
    assert boots["accuracy"] == pytest.approx(0.75)
    assert boots["cohen_kappa"] == pytest.approx(cohen_kappa_score(truth, said))
    assert boots["confusion"] == {"yes": {"yes": 1, "no": 1}, "no": {"yes": 0, "no": 2}}
    # (.2² + .3² + .1² + .6²) / 4 = .125
    assert boots["brier"] == pytest.approx(brier_score_loss([t == "yes" for t in truth], p_yes))
    assert boots["brier"] == pytest.approx(0.125)
    assert boots["ece"] is not None
    assert report["judge_versions"] == {}


def test_the_gep_chart_draws_the_judge_beside_the_people_and_its_tables_download(report):
    from protocols.attributes import charts

    [(_model, sources)] = charts.vector_panels(report, setting="neutral", models=["sdxl"])
    assert [source for source, _, _ in sources] == ["human", "broken", "clip", "vlm_judge@1"]
    svg = charts.gep_vector_chart(report, "svg", setting="neutral", keys=data.KEYS).decode()
    assert "bar-vlm_judge_1-boots" in svg


def test_the_judge_tables_are_in_the_page_and_download(db, client_for, researcher, report):
    from django.urls import reverse

    client = client_for(researcher)
    html = client.get(reverse("reports:overview") + "?study=gep").content.decode()
    assert "Judges&#x27; GEP beside the people&#x27;s" in html or "Judges' GEP beside the people's" in html
    assert "vlm_judge@1" in html
    for name in ("judges", "judge_gep"):
        response = client.get(reverse("reports:table", args=[name, "csv"]) + "?study=gep")
        assert response.status_code == 200
        assert "vlm_judge@1" in response.content.decode()
