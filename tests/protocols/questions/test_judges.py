"""Judges against people in the questions report: per judge run (detector@version) and
question n, accuracy, Cohen's κ, confusion, Brier and ECE; per T2I model the judge's shares
with Wilson intervals beside the people's; two versions side by side. The figures are checked
against scikit-learn and statsmodels on the same answers."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, brier_score_loss, cohen_kappa_score, confusion_matrix
from statsmodels.stats.proportion import proportion_confint

from protocols.questions.analysis import QuestionsAnalysis
from reports.selectors import Scope
from tests.protocols.questions.data import AGES, JUDGE_A, JUDGE_B, JUDGE_ITEMS, build_judge_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def report(tmp_path):
    study = build_judge_study(tmp_path)
    return QuestionsAnalysis().build(Scope(study))


def _a_rows():
    """(final, probabilities) of the items vlm_judge@a answered about age with a final answer."""
    return [
        (final, JUDGE_A[n]) for n, (_, _, final) in enumerate(JUDGE_ITEMS) if final and JUDGE_A[n] is not None
    ]


def test_each_judge_version_is_measured_against_people_as_scikit_learn_does(report):
    a = report["judges"]["vlm_judge@a"]["age"]
    rows = _a_rows()
    truth = [final for final, _ in rows]
    p = np.array([probabilities for _, probabilities in rows])
    said = [AGES[int(np.argmax(row))] for row in p]
    assert a["n"] == len(rows) == 9
    assert a["accuracy"] == pytest.approx(accuracy_score(truth, said))
    assert a["cohen_kappa"] == pytest.approx(cohen_kappa_score(truth, said))
    matrix = confusion_matrix(truth, said, labels=list(AGES))
    assert [[a["confusion"][t][s] for s in AGES] for t in AGES] == matrix.tolist()
    order = sorted(AGES)  # scikit-learn's column order
    columns = p[:, [AGES.index(v) for v in order]]
    assert a["brier"] == pytest.approx(brier_score_loss(truth, columns, labels=order))
    # Top-label ECE by hand: confidences .5 .7 .4 .6 .9 .5 .8 .6 .6 fall in bins 4 6 3 5 8 4 7 5 5.
    assert a["n_probabilities"] == 9
    assert [b["n"] for b in a["reliability"]] == [0, 0, 0, 1, 2, 3, 1, 1, 1, 0]
    assert a["excluded"] == {"failed": 1, "filtered": 0, "unanswered": 1}
    b = report["judges"]["vlm_judge@b"]["age"]
    truth_b = [final for (_, _, final), said in zip(JUDGE_ITEMS, JUDGE_B, strict=True) if final]
    said_b = [said for (_, _, final), said in zip(JUDGE_ITEMS, JUDGE_B, strict=True) if final]
    assert b["n"] == 11
    assert b["cohen_kappa"] == pytest.approx(cohen_kappa_score(truth_b, said_b))
    assert (b["brier"], b["ece"], b["reliability"]) == (None, None, [])  # no probabilities
    assert "wealth" not in b  # no final answer to it: nothing to compare


def test_the_ece_is_the_binned_gap_between_confidence_and_accuracy(report):
    rows = _a_rows()
    confidence = np.array([max(p) for _, p in rows])
    correct = np.array([AGES[int(np.argmax(p))] == final for final, p in rows])
    expected = 0.0
    for lo in np.arange(10) / 10:
        inside = (confidence > lo + 1e-9) & (confidence <= lo + 0.1 + 1e-9)
        if inside.any():
            expected += inside.mean() * abs(correct[inside].mean() - confidence[inside].mean())
    assert report["judges"]["vlm_judge@a"]["age"]["ece"] == pytest.approx(expected)


def test_the_judges_picture_per_model_lies_beside_the_peoples_with_wilson_intervals(report):
    cell = report["questions"]["age"]["sdxl"]
    b = cell["judges"]["vlm_judge@b"]
    # vlm_judge@b on sdxl: light young, old, middle; dark old, young, young.
    assert b["groups"]["light"]["n"] == 3
    assert b["groups"]["dark"]["shares"]["young"] == pytest.approx(2 / 3)
    lo, hi = proportion_confint(2, 3, alpha=0.05, method="wilson")
    assert b["groups"]["dark"]["ci95"]["young"] == [pytest.approx(lo), pytest.approx(hi)]
    # People on sdxl: light young 2/3, middle 1/3; dark old 2/3, young 1/3.
    assert cell["max_gap"] == pytest.approx({"young": 1 / 3, "middle": 1 / 3, "old": 2 / 3})
    assert b["max_gap"] == pytest.approx({"young": 1 / 3, "middle": 1 / 3, "old": 0.0})
    assert b["max_gap_error"] == pytest.approx({"young": 0.0, "middle": 0.0, "old": -2 / 3})
    assert set(b) >= {"groups", "chi2", "cramers_v", "max_gap", "max_gap_error"}
    # The judge's shares count what it answered: vlm_judge@a answered 1 light sdxl image about age.
    a = cell["judges"]["vlm_judge@a"]
    assert a["groups"]["light"]["n"] == 1
    # dalle's light image 11 has no final answer, yet the judge's shares count it.
    assert report["questions"]["age"]["dalle"]["judges"]["vlm_judge@b"]["groups"]["light"]["n"] == 3


def test_two_versions_of_one_judge_are_compared_with_each_other(report):
    pair = report["judge_versions"]["vlm_judge@a vs vlm_judge@b"]["age"]
    both = [
        (AGES[int(np.argmax(JUDGE_A[n]))], JUDGE_B[n])
        for n in range(len(JUDGE_ITEMS))
        if JUDGE_A[n] is not None
    ]
    assert pair["n"] == len(both) == 10
    assert pair["agreement"] == pytest.approx(np.mean([x == y for x, y in both]))
    assert pair["cohen_kappa"] == pytest.approx(cohen_kappa_score([x for x, _ in both], [y for _, y in both]))


def test_the_page_draws_each_judge_beside_the_people_titled_per_model_with_readable_labels(
    client_for, researcher, tmp_path
):
    from django.urls import reverse

    build_judge_study(tmp_path)
    html = client_for(researcher).get(reverse("reports:overview") + "?study=qj").content.decode()
    import re

    judge_bars = re.findall(
        r'class="judge-bar" data-judge="([^"]+)" data-group="(\w+)" data-answer="(\w+)"', html
    )
    assert ("vlm_judge@b", "dark", "young") in judge_bars
    assert {bar[0] for bar in judge_bars} == {"vlm_judge@a", "vlm_judge@b"}
    titles = re.findall(r'class="chart-title"[^>]*>([^<]+)<', html)
    assert sorted(titles) == ["dalle", "sdxl"]  # one per model (only age has final answers)
    sizes = [
        int(size)
        for size in re.findall(r'<svg class="shares".*?</svg>', html, re.S)
        for size in re.findall(r'font-size="(\d+)"', size)
    ]
    assert sizes
    assert min(sizes) >= 12
    assert 'data-judge="vlm_judge@a"' in html
    assert "1 failed, 0 filtered, 1 not answered" in html
    assert "max_gap_error" in html
    assert "Two versions of one judge" in html


@pytest.mark.parametrize(
    "name", ["question_shares", "question_tests", "question_agreement", "judges", "judge_versions"]
)
def test_every_table_downloads(client_for, researcher, tmp_path, name):
    from django.urls import reverse

    build_judge_study(tmp_path)
    client = client_for(researcher)
    for fmt in ("csv", "tex", "md"):
        response = client.get(reverse("reports:table", args=[name, fmt]) + "?study=qj")
        assert response.status_code == 200, (name, fmt)
    csv_text = client.get(
        reverse("reports:table", args=["question_tests", "csv"]) + "?study=qj"
    ).content.decode()
    assert "max_gap_error" in csv_text.splitlines()[0]


def test_the_charts_download_as_svg_and_png(client_for, researcher, tmp_path):
    from django.urls import reverse

    build_judge_study(tmp_path)
    client = client_for(researcher)
    shares = client.get(reverse("reports:chart", args=["shares", "svg"]) + "?study=qj")
    assert shares.status_code == 200
    assert shares.content.lstrip().startswith(b"<?xml")
    reliability = client.get(reverse("reports:chart", args=["reliability", "png"]) + "?study=qj")
    assert reliability.status_code == 200
    assert reliability.content.startswith(b"\x89PNG")
    assert client.get(reverse("reports:chart", args=["histogram", "svg"]) + "?study=qj").status_code == 404
