"""The object co-occurrence report: counts per class by gender, χ²,
residuals, counts by gender word, the paired permutation test over seed-matched pairs, the human
check of the detector and the χ² of confirmed boxes only — read from items, predictions and
final labels, computed by ``metrics.objects`` — and ``bias_report`` printing it.

The fixture study (hand-worked numbers in the tests):

    sd21   template 0 index 0: man   person tie tie       checked: person ✓ tie ✓ tie ✗, missed cup
                               woman person handbag       checked: person ✓ handbag ✓
                               boy   person motorcycle    checked, but one answer for two boxes
                               girl  person handbag cup   checked: person ✓ handbag ✗ cup ✓, missed handbag
           template 1 index 0: man   (nothing)
                               woman cup                  checked: cup ✗ (no missed answer)
                               boy   tie                  checked, but its boxes came from other_yolo
                               girl  (no image)
           + one image without gender, one man without a prediction (left out)
    dalle  template 0 index 0: man tie, woman tie          only one class: no χ²

Detector yolo_objects: version "0" said "clock" on the first image (older), version "1" the above.
"""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from scipy.stats import chi2_contingency

from annotate.models import FinalLabelSource
from detectors.kinds import KIND_OBJECTS
from metrics.objects import adjusted_residuals, pair_count_matrices, paired_permutation_test
from protocols.objects.analysis import ObjectsAnalysis
from reports.analyses import AnalysisError, analysis_for
from reports.selectors import Scope
from studies.models import Study
from tests.factories import (
    FinalLabelFactory,
    ItemFactory,
    PredictionFactory,
    StudyFactory,
    image_of,
    question_of,
)
from tests.metrics.test_objects import JSON_KEYS

pytestmark = pytest.mark.django_db
CONTRACT_KEYS = {"detector", *JSON_KEYS}
GENDER_OF = {"man": "male", "boy": "male", "woman": "female", "girl": "female"}


# --- the fixture study (the page tests import these) ------------------------------------------------


def box(name: str, confidence: float = 0.9) -> dict:
    return {"class": name, "confidence": confidence, "box": [2.0, 3.0, 20.0, 24.0]}


def predict(item, classes, *, detector="yolo_objects", version="1"):
    return PredictionFactory(
        image=image_of(item),
        detector=detector,
        version=version,
        kind=KIND_OBJECTS,
        output={"objects": [box(name) for name in classes]},
    )


def add_item(study, model, template, word, classes, *, index=0, predicted=True, **metadata):
    prompt, _ = study.prompts.get_or_create(
        category=f"template-{template}", word=word, text=f"A {word} with things ({template})"
    )
    fields = {"template": str(template), "gender_word": word, "gender": GENDER_OF.get(word, "")}
    item = ItemFactory(prompt=prompt, t2i_model=model, index=index, metadata=fields | metadata)
    if predicted:
        predict(item, classes)
    return item


def check(item, boxes, answers, missed=None, *, source="yolo_objects@1"):
    """Put ``boxes`` (class names) on the item as prepare_box_check would, with final answers."""
    item.metadata = item.metadata | {"boxes": [box(name) for name in boxes], "boxes_source": source}
    item.save(update_fields=["metadata"])
    FinalLabelFactory(
        item=item, question=question_of(item, "boxes"), value=answers, source=FinalLabelSource.AGREED
    )
    if missed is not None:
        FinalLabelFactory(
            item=item, question=question_of(item, "missed"), value=missed, source=FinalLabelSource.AGREED
        )


def build(slug: str = "cooccur") -> Study:
    study = StudyFactory(name="Object co-occurrence", slug=slug, protocol="objects")
    man = add_item(study, "sd21", 0, "man", ["person", "tie", "tie"], predicted=False)
    predict(man, ["clock"], version="0")  # an older version, written first: not read
    predict(man, ["person", "tie", "tie"])
    woman = add_item(study, "sd21", 0, "woman", ["person", "handbag"])
    boy = add_item(study, "sd21", 0, "boy", ["person", "motorcycle"])
    girl = add_item(study, "sd21", 0, "girl", ["person", "handbag", "cup"])
    add_item(study, "sd21", 1, "man", [])
    woman1 = add_item(study, "sd21", 1, "woman", ["cup"])
    boy1 = add_item(study, "sd21", 1, "boy", ["tie"])
    add_item(study, "sd21", 2, "person", ["person"], gender="")  # no gender: left out
    add_item(study, "sd21", 2, "man", [], predicted=False)  # no prediction: left out
    add_item(study, "dalle", 0, "man", ["tie"])
    add_item(study, "dalle", 0, "woman", ["tie"])
    check(man, ["person", "tie", "tie"], "yes,yes,no", "cup")
    check(woman, ["person", "handbag"], "yes,yes", "")
    check(girl, ["person", "handbag", "cup"], "yes,no,yes", "handbag")
    check(woman1, ["cup"], "no")
    check(boy, ["person", "motorcycle"], "yes")  # imported with the wrong length: not counted
    check(boy1, ["tie"], "yes", source="other_yolo@3")
    return study


@pytest.fixture
def study():
    return build()


def compute(study, **kwargs):
    return ObjectsAnalysis().compute(Scope(study), **kwargs)


# --- the contract ----------------------------------------------------------------------------------


def test_objects_is_a_registered_analysis():
    assert isinstance(analysis_for("objects"), ObjectsAnalysis)


def test_every_model_entry_has_the_contract_keys_and_json_types(study):
    report = compute(study).report
    assert set(report["objects"]) == {"dalle", "sd21"}
    for entry in report["objects"].values():
        assert set(entry) >= CONTRACT_KEYS
        assert entry["detector"] == "yolo_objects"
    assert json.loads(json.dumps(report)) == report  # JSON types only


def test_counts_chi_square_and_cramers_v_are_those_of_the_detections(study):
    entry = compute(study).report["objects"]["sd21"]
    assert entry["counts"] == {
        "person": {"male": 2, "female": 2},
        "motorcycle": {"male": 1, "female": 0},
        "handbag": {"male": 0, "female": 2},
        "tie": {"male": 3, "female": 0},
        "cup": {"male": 0, "female": 2},
    }
    table = np.array([[2, 1, 0, 3, 0], [2, 0, 2, 0, 2]])
    expected = chi2_contingency(table, correction=False)
    assert entry["chi2"] == pytest.approx(expected.statistic)
    assert entry["p_value"] == pytest.approx(expected.pvalue)
    assert entry["dof"] == 4
    assert entry["cramers_v"] == pytest.approx(math.sqrt(expected.statistic / 12))
    assert entry["includes_person"] is True
    assert entry["n_images"] == {"male": 4, "female": 3}


def test_residuals_are_the_adjusted_standardised_residuals_of_each_cell(study):
    entry = compute(study).report["objects"]["sd21"]
    expected = adjusted_residuals([[2, 1, 0, 3, 0], [2, 0, 2, 0, 2]])
    for j, name in enumerate(["person", "motorcycle", "handbag", "tie", "cup"]):
        assert entry["residuals"][name]["male"] == pytest.approx(expected[0, j])
        assert entry["residuals"][name]["female"] == pytest.approx(expected[1, j])


def test_counts_by_gender_word_use_the_same_classes(study):
    by_word = compute(study).report["objects"]["sd21"]["by_gender_word"]
    assert list(by_word) == ["boy", "girl", "man", "woman"]
    assert by_word["man"] == {"person": 1, "motorcycle": 0, "handbag": 0, "tie": 2, "cup": 0}
    assert by_word["boy"] == {"person": 1, "motorcycle": 1, "handbag": 0, "tie": 1, "cup": 0}
    assert by_word["woman"]["cup"] == 1


def test_the_paired_test_pairs_template_index_and_age_group(study):
    entry = compute(study, seed=5).report["objects"]["sd21"]
    # Pairs: (0, 0, adult), (0, 0, child), (1, 0, adult); (1, 0, child) has no girl image.
    male = [[1, 0, 0, 2, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    female = [[1, 0, 1, 0, 0], [1, 0, 1, 0, 1], [0, 0, 0, 0, 1]]
    expected = paired_permutation_test(male, female, seed=5)
    assert entry["paired_permutation"]["n_pairs"] == 3
    assert entry["paired_permutation"]["n_incomplete_pairs"] == 1
    assert entry["paired_permutation_p"] == expected.p_value


def test_the_human_check_counts_final_answers_per_class(study):
    entry = compute(study).report["objects"]["sd21"]
    check = entry["human_check"]
    assert list(check) == ["person", "handbag", "tie", "cup"]  # COCO order
    assert {name: (c["n_confirmed"], c["n_rejected"], c["n_missed"]) for name, c in check.items()} == {
        "person": (3, 0, 0),
        "handbag": (1, 1, 1),
        "tie": (1, 1, 0),
        "cup": (1, 1, 1),
    }
    assert check["person"]["precision"] == 1.0
    assert check["tie"]["precision"] == 0.5
    assert check["cup"]["missed_rate"] == 0.5
    assert entry["n_checked"] == 4


def test_confirmed_boxes_only_give_their_own_chi_square(study):
    confirmed = compute(study).report["objects"]["sd21"]["confirmed"]
    # man: person, tie; woman: person, handbag; girl: person, cup; t1 woman: nothing confirmed.
    assert confirmed["counts"] == {
        "person": {"male": 1, "female": 2},
        "handbag": {"male": 0, "female": 1},
        "tie": {"male": 1, "female": 0},
        "cup": {"male": 0, "female": 1},
    }
    expected = chi2_contingency(np.array([[1, 0, 1, 0], [2, 1, 0, 1]]), correction=False)
    assert confirmed["chi2"] == pytest.approx(expected.statistic)
    assert confirmed["n_images"] == {"male": 1, "female": 3}
    assert "human_check" not in confirmed


def test_a_model_with_one_class_has_no_chi_square_and_says_why(study):
    entry = compute(study).report["objects"]["dalle"]
    assert entry["counts"] == {"tie": {"male": 1, "female": 1}}
    assert (entry["chi2"], entry["dof"], entry["p_value"], entry["cramers_v"]) == (None, None, None, None)
    assert entry["chi2_reason"] == "fewer than two object classes: χ² needs at least two columns"
    assert entry["paired_permutation_p"] is None
    assert entry["human_check"] is None
    assert entry["confirmed"] is None


def test_coverage_says_what_was_left_out_and_which_checks_did_not_count(study):
    coverage = compute(study).report["coverage"]
    assert coverage == {
        "items": 11,
        "items_compared": 9,
        "items_left_out": 2,
        "left_out_reasons": {
            "no metadata gender (male or female needed)": 1,
            "no ok prediction of yolo_objects@1 on its image": 1,
        },
        "items_checked": 4,
        "checks_not_counted": {
            "its box answer does not fit its boxes (or it has none)": 1,
            "its boxes came from other_yolo@3, not yolo_objects": 1,
        },
    }


def test_person_can_be_left_out_per_report_or_per_study(study):
    entry = compute(study, include_person=False).report["objects"]["sd21"]
    assert "person" not in entry["counts"]
    assert entry["includes_person"] is False
    expected = chi2_contingency(np.array([[1, 0, 3, 0], [0, 2, 0, 2]]), correction=False)
    assert entry["chi2"] == pytest.approx(expected.statistic)
    assert "person" not in entry["confirmed"]["counts"]
    study.parameters = {"include_person": False}
    study.save()
    assert compute(study).report["includes_person"] is False


def test_a_t2i_model_filter_reports_that_model_only(study):
    report = ObjectsAnalysis().compute(Scope(study, t2i_model="dalle")).report
    assert list(report["objects"]) == ["dalle"]
    assert report["coverage"]["items"] == 2


# --- which detector ------------------------------------------------------------------------------


def test_several_objects_detectors_need_a_choice(study):
    predict(study.items.first(), ["cup"], detector="detr")
    with pytest.raises(
        AnalysisError, match=r"several detectors \(detr, yolo_objects\): choose one with --detector"
    ):
        compute(study)
    report = compute(study, detector="detr").report
    assert report["detector"] == "detr"
    assert report["objects"]["sd21"]["counts"] == {"cup": {"male": 1, "female": 0}}
    assert report["objects"]["sd21"]["human_check"] is None  # people checked yolo_objects' boxes


def test_a_detector_without_objects_predictions_is_refused(study):
    PredictionFactory(image=image_of(study.items.first()), detector="clip")  # a gender detector
    with pytest.raises(
        AnalysisError,
        match=r"Detector 'clip' has no objects prediction .*\(objects detectors: yolo_objects\)",
    ):
        compute(study, detector="clip")


def test_a_study_without_predictions_says_to_run_the_detector():
    empty = StudyFactory(slug="fresh", protocol="objects")
    add_item(empty, "sd21", 0, "man", [], predicted=False)
    with pytest.raises(AnalysisError, match=r"run run_detectors --detector yolo_objects --study fresh"):
        compute(empty)


# --- the command ---------------------------------------------------------------------------------


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("bias_report", *args, stdout=out)
    return out.getvalue()


def test_bias_report_prints_the_json_report(study):
    printed = json.loads(run("--study", "cooccur", "--format", "json"))
    assert printed == json.loads(json.dumps(compute(study).report))


def test_bias_report_exclude_person_switch(study):
    printed = json.loads(run("--study", "cooccur", "--exclude-person"))
    assert printed["includes_person"] is False
    assert all("person" not in entry["counts"] for entry in printed["objects"].values())


def test_bias_report_refuses_exclude_person_for_another_protocol(study):
    StudyFactory(slug="gender")
    with pytest.raises(CommandError, match="--exclude-person is for object co-occurrence studies"):
        run("--study", "gender", "--exclude-person")


def test_bias_report_turns_a_missing_detector_choice_into_a_clear_error(study):
    predict(study.items.first(), ["cup"], detector="detr")
    with pytest.raises(CommandError, match="several detectors"):
        run("--study", "cooccur")
    assert json.loads(run("--study", "cooccur", "--detector", "detr"))["detector"] == "detr"


def test_bias_report_csv_prints_the_table_it_is_asked_for(study):
    headers = [
        next(csv.reader(io.StringIO(run("--study", "cooccur", "--format", "csv", "--table", name))))[:1]
        for name in ("tests", "contingency", "by_gender_word", "human_check")
    ]
    assert headers == [["section"]] * 4
    rows = list(
        csv.DictReader(io.StringIO(run("--study", "cooccur", "--format", "csv", "--table", "contingency")))
    )
    tie = next(r for r in rows if r["class"] == "tie")
    assert (tie["sd21_male"], tie["sd21_female"]) == ("3", "0")


def test_bias_report_markdown_has_the_tables_and_the_coverage(study):
    text = run("--study", "cooccur", "--format", "md")
    assert text.startswith("# Object co-occurrence report")
    assert "Detector yolo_objects@1; person counted. Items: 11, compared: 9, left out: 2" in text
    assert "## Object instances per class by prompt gender (Table 1)" in text


def test_pair_ids_of_the_fixture_match_the_metrics_helper(study):
    """The selector's pairs are the ones ``pair_count_matrices`` builds from the same images."""
    result = compute(study, seed=1)
    analysis = result.analysis("sd21")
    images = [
        ("male", ["person", "tie", "tie"], ("0", 0, "adult")),
        ("female", ["person", "handbag"], ("0", 0, "adult")),
        ("male", ["person", "motorcycle"], ("0", 0, "child")),
        ("female", ["person", "handbag", "cup"], ("0", 0, "child")),
        ("male", [], ("1", 0, "adult")),
        ("female", ["cup"], ("1", 0, "adult")),
        ("male", ["tie"], ("1", 0, "child")),
    ]
    male, female, incomplete = pair_count_matrices(images, analysis.contingency.classes)
    assert incomplete == 1
    assert analysis.paired_permutation.p_value == paired_permutation_test(male, female, seed=1).p_value


# --- the paper's numbers, end to end -------------------------------------------------------------


def test_the_report_reproduces_the_papers_p_values_from_stored_detections():
    """Mannering (2023) Table 1 stored as detections (one image per model and gender holding all
    its instances, in darknet's spelling): the report prints the paper's χ² p-values, 0.000009
    (Stable Diffusion) and 0.04172 (DALL·E mini), with person counted as the paper did."""
    from tests.metrics.test_objects import TABLE_1

    study = StudyFactory(slug="paper", protocol="objects")
    for model, offset in (("sd", 0), ("dalle", 2)):
        for word, column in (("man", offset), ("woman", offset + 1)):
            classes = [name for name, row in TABLE_1.items() for _ in range(row[column])]
            add_item(study, model, 0, word, classes)
    report = compute(study, include_person=True).report["objects"]
    assert (report["sd"]["dof"], report["dalle"]["dof"]) == (51, 41)
    assert round(report["sd"]["p_value"], 6) == 0.000009
    assert round(report["dalle"]["p_value"], 5) == 0.04172
    assert report["sd"]["counts"]["motorcycle"] == {"male": 2, "female": 0}  # darknet's "motorbike"
    without = compute(study, include_person=False).report["objects"]
    assert round(without["sd"]["p_value"], 6) == 0.00001
