"""The questions protocol's few-label estimate: a round drawn for an ``answers``
detector, the ``estimate_bias`` JSON / CSV / Markdown in the shape ``bias_report`` places the
same numbers, the census case (``bias_report``'s exact shares, width 0), the API and the page."""

from __future__ import annotations

import io
import json
from functools import partial

import pytest
from django.core.management import call_command
from django.db.models import Sum

from detectors.models import Prediction
from estimates.models import SamplingRound
from protocols.questions.analysis import QuestionsAnalysis
from reports.selectors import Scope
from studies.models import Item
from tests.estimates.conftest import estimate_after_an_api_round, estimate_page_after_a_round, finish_answers
from tests.factories import ItemFactory, image_of
from tests.protocols.questions.data import define_questions_study
from tests.sqlite_limits import sqlite_variable_limit

pytestmark = pytest.mark.django_db

ESTIMAND_KEYS = {"estimate", "ci95", "human_only", "detector_only", "lambda", "effective_labels"}
PER_GROUP = 20


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _truth(i: int, skin: str) -> dict[str, str]:
    # light: young 3 in 4; dark: young 1 in 4 (the rest old). wealth: rich half the time in both.
    young = (i % 4 != 0) if skin == "light" else (i % 4 == 0)
    return {"age": "young" if young else "old", "wealth": "rich" if i % 2 else "poor"}


@pytest.fixture
def q_study(tmp_path):
    study, prompt = define_questions_study(tmp_path, slug="qe", labels_per_item=1)
    truth: dict[int, dict[str, str]] = {}
    for skin in ("light", "dark"):
        for i in range(PER_GROUP):
            item = ItemFactory(prompt=prompt, metadata={"skin": skin}, t2i_model="sdxl", key=f"{skin}{i}.png")
            truth[item.pk] = _truth(i, skin)
            said = dict(truth[item.pk])
            if skin == "dark" and i == 1:
                said["age"] = "middle"  # one error
            Prediction.objects.create(
                image=image_of(item), detector="llava", version="1", kind="answers", output=said
            )
    return study, truth


def test_a_questions_study_gets_a_round_and_shares_and_max_gap_where_bias_report_puts_them(q_study):
    study, truth = q_study
    _run("sample_for_labeling", "--study", "qe", "--detector", "llava", "--budget", "24", "--seed", "4")
    sampling_round = SamplingRound.objects.get()
    assert sampling_round.n_selected > 1
    finish_answers(study, truth, sampling_round)
    body = json.loads(_run("estimate_bias", "--study", "qe", "--detector", "llava", "--format", "json")[0])
    cell = body["questions"]["age"]["sdxl"]
    assert set(cell) == {"groups", "max_gap", "n_items", "n_labelled"}
    assert set(cell["groups"]) == {"light", "dark"}
    light = cell["groups"]["light"]
    assert light["n_items"] == PER_GROUP
    assert set(light["shares"]) == {"young", "middle", "old"}
    young = light["shares"]["young"]
    assert set(young) == ESTIMAND_KEYS
    assert young["ci95"][0] <= 0.75 <= young["ci95"][1]
    assert young["detector_only"] == pytest.approx(0.75)
    gap = cell["max_gap"]["young"]
    assert set(gap) == ESTIMAND_KEYS
    assert gap["ci95"][0] <= 0.5 <= gap["ci95"][1]
    assert gap["detector_only"] == pytest.approx(0.75 - 0.25)
    # The detector is nearly perfect: it earns a high weight.
    assert young["lambda"] > 0.5
    assert body["rounds"] == [1]


def test_every_item_labelled_without_a_round_gives_bias_reports_exact_shares_with_width_zero(q_study):
    study, truth = q_study
    finish_answers(study, truth, Item.objects.filter(study=study))
    body = json.loads(_run("estimate_bias", "--study", "qe", "--detector", "llava")[0])
    report = QuestionsAnalysis().compute(Scope(study)).report
    for key in ("age", "wealth"):
        expected = report["questions"][key]["sdxl"]
        got = body["questions"][key]["sdxl"]
        for group, g in expected["groups"].items():
            for answer, share in g["shares"].items():
                est = got["groups"][group]["shares"][answer]
                assert est["estimate"] == pytest.approx(share)
                assert est["ci95"] == pytest.approx([share, share])
        for answer, value in expected["max_gap"].items():
            assert got["max_gap"][answer]["estimate"] == pytest.approx(value)
            assert got["max_gap"][answer]["ci95"] == pytest.approx([value, value])


def test_before_any_round_only_the_detectors_numbers_are_known(q_study):
    body = json.loads(_run("estimate_bias", "--study", "qe", "--detector", "llava")[0])
    gap = body["questions"]["age"]["sdxl"]["max_gap"]["young"]
    assert gap["estimate"] is None
    assert gap["detector_only"] == pytest.approx(0.5)
    assert "No complete sampling round" in body["warnings"][0]


def test_markdown_and_csv_list_every_share_and_gap(q_study):
    study, truth = q_study
    _run("sample_for_labeling", "--study", "qe", "--detector", "llava", "--budget", "12", "--seed", "2")
    finish_answers(study, truth, SamplingRound.objects.get())
    csv_text, _ = _run("estimate_bias", "--study", "qe", "--detector", "llava", "--format", "csv")
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("question,t2i_model,estimand,group,answer,estimate,ci95")
    # age: 2 groups x 3 answers + 3 gaps; wealth: 2 x 3 + 3.
    assert len(lines) == 1 + 9 + 9
    assert any(line.startswith("age,sdxl,max_gap,,young,") for line in lines)
    md, _ = _run("estimate_bias", "--study", "qe", "--detector", "llava", "--format", "md")
    assert "| age | sdxl | share | light | young |" in md


def test_the_api_draws_a_questions_round_and_returns_its_estimate(q_study, researcher, api_for):
    study, truth = q_study
    body = estimate_after_an_api_round(
        api_for(researcher), partial(finish_answers, study, truth), study="qe", detector="llava"
    )
    assert set(body["questions"]["wealth"]["sdxl"]["max_gap"]["rich"]) == ESTIMAND_KEYS


def test_the_page_shows_a_questions_estimate_and_label_n_more_draws_its_round(
    q_study, client_for, researcher
):
    study, truth = q_study
    page = estimate_page_after_a_round(
        client_for(researcher), partial(finish_answers, study, truth), "/reports/estimate/?study=qe"
    )
    assert "Answer shares estimated from llava@1 and sampled labels" in page
    assert "max_gap" in page
    assert "Label N more" in page
    # The width-against-labels chart waits for a second complete round (one point says nothing).
    assert 'id="chart-later"' in page


def test_the_chart_has_a_point_per_complete_round(q_study):
    from protocols.questions.estimates import questions_report

    study, truth = q_study
    for seed in (1, 2):
        _run(
            "sample_for_labeling",
            "--study",
            "qe",
            "--detector",
            "llava",
            "--budget",
            "10",
            "--seed",
            str(seed),
        )
        finish_answers(study, truth, SamplingRound.objects.order_by("-number").first())
    report = questions_report(study, "llava", history=True)
    lines = {line.name: line.points for line in report.history}
    assert set(lines) == {"age sdxl max_gap", "wealth sdxl max_gap"}
    labels = [p[0] for p in lines["age sdxl max_gap"]]
    assert len(labels) == 2
    assert labels[0] < labels[1] == SamplingRound.objects.aggregate(n=Sum("n_selected"))["n"]


def test_a_stratified_round_draws_by_the_detectors_answers_and_its_estimate_holds_the_truth(q_study):
    study, truth = q_study
    for seed in (1, 2):
        _run(
            "sample_for_labeling",
            *("--study", "qe", "--detector", "llava", "--budget", "10", "--seed", str(seed)),
            *("--design", "stratified"),
        )
        sampling_round = SamplingRound.objects.order_by("-number").first()
        assert sampling_round.design == "stratified"
        finish_answers(study, truth, sampling_round)
    # π is logged per item. Round 1 has no labels to learn from: proportional allocation (one
    # π); round 2 gives the detector's answer codes where round 1 found it wrong more.
    first, second = SamplingRound.objects.order_by("number")
    assert {round(p, 6) for p in first.round_items.values_list("pi", flat=True)} == {0.25}
    pool = [p for p in second.round_items.values_list("pi", flat=True) if p > 0]
    assert sum(pool) == pytest.approx(10)
    assert len({round(p, 6) for p in pool}) > 1
    body = json.loads(_run("estimate_bias", "--study", "qe", "--detector", "llava")[0])
    assert body["rounds"] == [1, 2]
    young = body["questions"]["age"]["sdxl"]["groups"]["light"]["shares"]["young"]
    assert young["ci95"][0] <= 0.75 <= young["ci95"][1]


def test_the_estimate_of_more_items_than_a_statement_may_name_reads_them_under_the_limit(q_study, settings):
    """SQLite's limit of bound values at 30, the chunks cut at 15: the 40 items of the frame
    are never named in one statement (the questions each asks were read by a list of every
    item of the frame)."""
    study, truth = q_study
    finish_answers(study, truth, Item.objects.filter(study=study))
    settings.BIASLAB_SQL_MAX_VARIABLES = 25
    with sqlite_variable_limit(30):
        body = json.loads(_run("estimate_bias", "--study", "qe", "--detector", "llava")[0])
    assert body["questions"]["age"]["sdxl"]["groups"]["light"]["n_items"] == PER_GROUP
