"""The objects protocol's few-label estimate: confirmed instances per class and
gender and Cramér's V of that table, from the detector's counts and sampled box checks; placed
where ``bias_report`` puts the confirmed figures; the census case gives its exact numbers."""

from __future__ import annotations

import io
import json
from functools import partial

import pytest
from django.core.management import call_command

from estimates.models import SamplingRound
from protocols.objects.analysis import ObjectsAnalysis
from reports.selectors import Scope
from studies.models import Item
from tests.estimates.conftest import estimate_page_after_a_round, selected_items
from tests.factories import StudyFactory
from tests.reports.test_objects_report import add_item, check

pytestmark = pytest.mark.django_db

ESTIMAND_KEYS = {"estimate", "ci95", "human_only", "detector_only", "lambda", "effective_labels"}
PER_GENDER = 15


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def boxes_study():
    """Men get a tie on every image, women a handbag on two in three; the detector also sees a
    false cup on every fifth image (people reject it)."""
    study = StudyFactory(slug="boxes", protocol="objects")
    answers: dict[int, tuple[list[str], str]] = {}
    for word in ("man", "woman"):
        for i in range(PER_GENDER):
            found = ["tie"] if word == "man" else (["handbag"] if i % 3 else [])
            said = ["yes"] * len(found)
            if i % 5 == 0:
                found, said = [*found, "cup"], [*said, "no"]
            item = add_item(study, "sdxl", i, word, found, index=i)
            answers[item.pk] = (found, ",".join(said))
    return study, answers


def _check(answers, items) -> None:
    for item in items:
        found, said = answers[item.pk]
        check(item, found, said)


def _check_round(answers, sampling_round: SamplingRound) -> None:
    _check(answers, selected_items(sampling_round))


def _draw_and_check(answers, *, seed: int, budget: int = 12, more: tuple[str, ...] = ()) -> None:
    """Draw a yolo_objects round with ``sample_for_labeling`` and check its boxes as people would."""
    _run(
        "sample_for_labeling",
        *("--study", "boxes", "--detector", "yolo_objects", "--budget", str(budget), "--seed", str(seed)),
        *more,
    )
    _check_round(answers, SamplingRound.objects.order_by("-number").first())


def test_an_objects_study_gets_a_round_and_confirmed_counts_where_bias_report_puts_them(boxes_study):
    _study, answers = boxes_study
    _draw_and_check(answers, seed=3)
    sampling_round = SamplingRound.objects.get()
    body = json.loads(_run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects")[0])
    cell = body["objects"]["sdxl"]
    assert (cell["n_items"], cell["n_labelled"]) == (2 * PER_GENDER, sampling_round.n_selected)
    counts = cell["confirmed"]["counts"]
    assert set(counts) == {"tie", "handbag", "cup"}
    tie = counts["tie"]["male"]
    assert set(tie) == ESTIMAND_KEYS
    assert tie["detector_only"] == pytest.approx(PER_GENDER)
    assert tie["ci95"][0] <= PER_GENDER <= tie["ci95"][1]
    cup = counts["cup"]["female"]
    assert cup["detector_only"] == pytest.approx(3)
    assert cup["ci95"][0] <= 0 <= cup["ci95"][1]
    v = cell["confirmed"]["cramers_v"]
    assert set(v) == ESTIMAND_KEYS
    assert 0 <= v["ci95"][0] <= v["ci95"][1] <= 1


def test_every_image_checked_without_a_round_gives_the_reports_confirmed_table_with_width_zero(boxes_study):
    study, answers = boxes_study
    _check(answers, Item.objects.filter(study=study))
    body = json.loads(_run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects")[0])
    report = ObjectsAnalysis().compute(Scope(study), detector="yolo_objects").report
    confirmed = report["objects"]["sdxl"]["confirmed"]
    got = body["objects"]["sdxl"]["confirmed"]
    for name, by_gender in confirmed["counts"].items():
        for gender, n in by_gender.items():
            assert got["counts"][name][gender]["estimate"] == pytest.approx(n)
            assert got["counts"][name][gender]["ci95"] == pytest.approx([n, n])
    assert got["cramers_v"]["estimate"] == pytest.approx(confirmed["cramers_v"])
    assert got["cramers_v"]["ci95"] == pytest.approx([confirmed["cramers_v"]] * 2)


def test_before_any_round_only_the_detectors_table_is_known(boxes_study):
    body = json.loads(_run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects")[0])
    v = body["objects"]["sdxl"]["confirmed"]["cramers_v"]
    assert v["estimate"] is None
    assert v["detector_only"] is not None
    assert "No complete sampling round" in body["warnings"][0]


def test_csv_and_markdown_list_v_and_every_count(boxes_study):
    _study, answers = boxes_study
    _draw_and_check(answers, seed=2)
    assert SamplingRound.objects.count() == 1
    lines = _run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects", "--format", "csv")[
        0
    ].splitlines()
    assert lines[0].startswith("t2i_model,estimand,class,gender,estimate,ci95")
    assert lines[1].startswith("sdxl,cramers_v,,,")
    assert len(lines) == 1 + 1 + 3 * 2
    md = _run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects", "--format", "md")[0]
    assert "| sdxl | count | tie | male |" in md


def test_the_page_shows_an_objects_estimate(boxes_study, client_for, researcher):
    _study, answers = boxes_study
    client = client_for(researcher)
    page = estimate_page_after_a_round(
        client, partial(_check_round, answers), "/reports/estimate/?study=boxes"
    )
    assert "Confirmed objects estimated from yolo_objects@1 and sampled box checks" in page
    assert "cramers_v" in page


def test_stratified_rounds_by_the_number_of_detections_keep_the_truth_inside(boxes_study):
    _study, answers = boxes_study
    for seed in (1, 2):
        _draw_and_check(answers, seed=seed, budget=8, more=("--design", "stratified"))
    second = SamplingRound.objects.get(number=2)
    # π is logged per item and sums to the budget over the items no round drew before.
    pool = [p for p in second.round_items.values_list("pi", flat=True) if p > 0]
    assert sum(pool) == pytest.approx(8)
    body = json.loads(_run("estimate_bias", "--study", "boxes", "--detector", "yolo_objects")[0])
    assert body["rounds"] == [1, 2]
    tie = body["objects"]["sdxl"]["confirmed"]["counts"]["tie"]["male"]
    assert tie["ci95"][0] <= PER_GENDER <= tie["ci95"][1]
