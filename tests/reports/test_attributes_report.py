"""The GEP report of an attributes study: its JSON contract, worked by hand on the small
study of ``attributes_data`` and checked against scipy / scikit-learn where they define the
same statistic."""

from __future__ import annotations

import json
import math
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from scipy.stats import kendalltau, pearsonr

from protocols.attributes.analysis import AttributesAnalysis
from reports.analyses import AnalysisError, analysis_for, analysis_of
from reports.selectors import Scope
from studies.models import Question
from tests.reports import attributes_data as data


@pytest.fixture
def fx(db, annotator_a, annotator_b, annotator_c):
    return data.build(data.attributes_study(), [annotator_a, annotator_b, annotator_c])


@pytest.fixture
def report(fx):
    return analysis_of(fx.study).build(Scope(fx.study))


def bias_report(*args: str) -> dict:
    out = StringIO()
    call_command("bias_report", *args, stdout=out)
    return json.loads(out.getvalue())


def test_the_attributes_protocol_has_its_analysis_in_the_registry():
    analysis = analysis_for("attributes")
    assert isinstance(analysis, AttributesAnalysis)
    assert analysis.protocol == "attributes"


def test_the_report_has_exactly_the_contract_keys(report):
    cell = report["attributes"]["sdxl"]["neutral"]
    assert {"attributes", "agreement", "score_ranking"} <= set(report)
    assert {"n_items", "frequencies", "gep_vector", "gep_score", "detectors"} <= set(cell)
    assert set(cell["n_items"]) == set(cell["frequencies"]) == {"woman", "man"}
    assert set(cell["detectors"]) == {"clip", "broken"}
    assert set(cell["detectors"]["clip"]) == {
        "gep_vector",
        "gep_score",
        "kendall_tau_b",
        "mcc",
        "pearson",
        "roc_auc",
    }
    assert set(report["agreement"]["boots"]) == {
        "krippendorff_alpha",
        "fleiss_kappa",
        "observed_agreement",
        "n_items",
    }
    assert set(report["attributes"]) == {"sdxl", "sd3"}
    assert set(report["attributes"]["sd3"]) == {"neutral"}  # settings a model has images in


def test_human_frequencies_vector_and_score_are_worked_by_hand(report):
    cell = report["attributes"]["sdxl"]["neutral"]
    assert cell["n_items"] == {"woman": 2, "man": 3}
    assert cell["frequencies"] == {
        "woman": {"boots": 0.5, "dress": 1.0, "tie": 0.0},
        "man": {"boots": 0.5, "dress": 0.0, "tie": 0.5},
    }
    assert cell["gep_vector"] == {"boots": 0.0, "dress": 1.0, "tie": -0.5}
    assert cell["gep_score"] == pytest.approx(0.5)
    assert report["attributes"]["sd3"]["neutral"]["gep_score"] == pytest.approx(1 / 3)


def test_an_item_without_a_final_answer_is_left_out_and_counted(report):
    cell = report["attributes"]["sdxl"]["neutral"]
    assert cell["n_without_final_answer"] == {
        "woman": {"boots": 0, "dress": 0, "tie": 0},
        "man": {"boots": 1, "dress": 1, "tie": 1},
    }


def test_explicit_items_count_only_for_the_attribute_their_prompt_names(report):
    cell = report["attributes"]["sdxl"]["explicit"]
    assert cell["n_items"] == {"woman": 2, "man": 2}
    assert cell["frequencies"]["woman"] == {"boots": None, "dress": 1.0, "tie": 1.0}
    assert cell["frequencies"]["man"] == {"boots": None, "dress": 0.0, "tie": 1.0}
    assert cell["gep_vector"] == {"boots": None, "dress": 1.0, "tie": 0.0}


def test_undefined_figures_are_null_never_zero(report):
    explicit = report["attributes"]["sdxl"]["explicit"]
    assert explicit["gep_score"] is None  # no boots image: a mean over fewer attributes is another statistic
    clip = explicit["detectors"]["clip"]  # no prediction on any explicit image
    assert clip["gep_score"] is None
    assert set(clip["gep_vector"].values()) == {None}
    assert (clip["kendall_tau_b"], clip["mcc"], clip["pearson"]) == (None, None, None)
    assert clip["roc_auc"]["mean"] is None
    broken = report["attributes"]["sdxl"]["neutral"]["detectors"]["broken"]  # failed everywhere
    assert (broken["gep_score"], broken["kendall_tau_b"]) == (None, None)
    assert report["score_ranking"]["broken"] is None


def test_the_detector_vector_uses_the_latest_version_and_mean_scores(report):
    clip = report["attributes"]["sdxl"]["neutral"]["detectors"]["clip"]
    expected = {"boots": 0.55 - 1.4 / 3, "dress": 0.75 - 0.8 / 3, "tie": 0.525 - 1.7 / 3}
    assert clip["gep_vector"] == pytest.approx(expected)
    assert clip["gep_score"] == pytest.approx(sum(abs(v) for v in expected.values()) / 3)
    assert report["detector_versions"] == {"broken": "x", "clip": "1"}


def test_validation_statistics_agree_with_scipy(report):
    cell = report["attributes"]["sdxl"]["neutral"]
    clip = cell["detectors"]["clip"]
    auto = [clip["gep_vector"][k] for k in data.KEYS]
    human = [cell["gep_vector"][k] for k in data.KEYS]
    assert clip["kendall_tau_b"] == pytest.approx(kendalltau(auto, human, variant="b").statistic)
    assert clip["kendall_tau_b"] == pytest.approx(1.0)
    assert clip["pearson"] == pytest.approx(pearsonr(auto, human).statistic)
    assert clip["mcc"] == pytest.approx(1.0)  # signs (+, +, -) against (0 counts +, +, -)
    sd3 = report["attributes"]["sd3"]["neutral"]
    sd3_auto = [sd3["detectors"]["clip"]["gep_vector"][k] for k in data.KEYS]
    sd3_human = [sd3["gep_vector"][k] for k in data.KEYS]
    assert sd3["detectors"]["clip"]["kendall_tau_b"] == pytest.approx(2 / math.sqrt(6))  # a tie in human
    assert sd3["detectors"]["clip"]["kendall_tau_b"] == pytest.approx(
        kendalltau(sd3_auto, sd3_human, variant="b").statistic
    )


def test_roc_auc_is_per_attribute_and_averaged_against_the_final_answers(report):
    from sklearn.metrics import roc_auc_score

    auc = report["attributes"]["sdxl"]["neutral"]["detectors"]["clip"]["roc_auc"]
    # tie: the one yes (M1, .9) against the noes .1, .95, .3 — it beats two of three.
    assert auc["by_attribute"]["tie"] == pytest.approx(roc_auc_score([0, 0, 1, 0], [0.1, 0.95, 0.9, 0.3]))
    assert auc["by_attribute"] == pytest.approx({"boots": 1.0, "dress": 1.0, "tie": 2 / 3})
    assert auc["mean"] == pytest.approx((1 + 1 + 2 / 3) / 3)


def test_score_ranking_is_kendall_tau_b_over_the_model_setting_cells(report):
    # Two defined cells: human .5 (sdxl) > 1/3 (sd3); clip .2028 > .2 — the same order.
    assert report["score_ranking"] == {"broken": None, "clip": pytest.approx(1.0)}


def test_agreement_per_question_is_worked_by_hand(report):
    boots = report["agreement"]["boots"]
    # Units W1 (y y n), W2 (n n n), M3 (y n): Fleiss P-bar (1/3 + 1 + 0) / 3, p_e (3/8)^2 + (5/8)^2.
    p_bar, p_e = 4 / 9, 34 / 64
    assert boots["n_items"] == 3
    assert boots["observed_agreement"] == pytest.approx(p_bar)
    assert boots["fleiss_kappa"] == pytest.approx((p_bar - p_e) / (1 - p_e))
    # Krippendorff: observed disagreement 2 + 0 + 2, expected 8^2 - (3^2 + 5^2), n = 8.
    assert boots["krippendorff_alpha"] == pytest.approx(1 - 7 * 4 / 30)
    tie = report["agreement"]["tie"]
    assert tie == {"krippendorff_alpha": None, "fleiss_kappa": None, "observed_agreement": None, "n_items": 0}


def test_disputes_are_items_with_every_label_and_no_final_answer(report):
    assert report["disputes"] == {"boots": 0, "dress": 1, "tie": 0}


def test_items_without_usable_metadata_are_left_out_and_counted(report):
    assert report["coverage"] == {
        "items": 13,
        "items_compared": 11,
        "items_left_out": 2,
        "left_out_reasons": {
            "no metadata gender (woman or man)": 1,
            "metadata setting 'office' is not one of neutral, explicit": 1,
        },
    }


def test_the_t2i_model_and_detector_filters_narrow_the_report(fx):
    narrowed = analysis_of(fx.study).build(Scope(fx.study, t2i_model="sd3"), detector="clip")
    assert set(narrowed["attributes"]) == {"sd3"}
    assert set(narrowed["attributes"]["sd3"]["neutral"]["detectors"]) == {"clip"}
    assert narrowed["score_ranking"] == {"clip": None}  # one cell: no ranking


def test_bias_report_prints_the_json_contract_for_an_attributes_study(fx):
    printed = bias_report("--study", "gep", "--format", "json")
    assert printed == json.loads(json.dumps(analysis_of(fx.study).build(Scope(fx.study))))
    assert printed["attributes"]["sdxl"]["explicit"]["gep_score"] is None
    assert bias_report("--study", "gep", "--t2i-model", "sd3", "--detector", "clip")["score_ranking"] == {
        "clip": None
    }


def test_bias_report_csv_has_one_section_per_table(fx):
    names = [
        "gep_scores",
        "frequencies",
        "gep_vectors",
        "vector_agreement",
        "score_ranking",
        "roc_auc",
        "roc_auc_attributes",
        "agreement",
    ]
    sections = []
    for name in names:
        out = StringIO()
        call_command("bias_report", "--study", "gep", "--format", "csv", "--table", name, stdout=out)
        sections.append(out.getvalue().splitlines())
    assert [lines[1].split(",")[0] for lines in sections] == names
    assert sections[0][0].startswith("section,t2i_model,neutral_gep,")
    assert "gep_scores,sdxl,0.5,2,3,,2,2" in sections[0]


def test_bias_report_md_titles_each_table_with_the_paper_table(fx):
    out = StringIO()
    call_command("bias_report", "--study", "gep", "--format", "md", stdout=out)
    text = out.getvalue()
    assert "## GEP score by the human answers (Table 3)" in text
    assert "## GEP scores across models and settings (Table 6)" in text
    assert "left out (1): no metadata gender (woman or man)" in text


def test_a_study_whose_questions_are_not_yes_no_gets_a_clear_error(fx):
    Question.objects.filter(study=fx.study, key="tie").update(
        choices=[{"value": "maybe", "name": "Maybe", "key": "m"}, {"value": "no", "name": "No", "key": "n"}]
    )
    with pytest.raises(AnalysisError, match=r"Question 'tie' .* has the answers maybe, no"):
        analysis_of(fx.study)
    with pytest.raises(CommandError, match="needs exactly yes and no"):
        bias_report("--study", "gep")


def test_an_empty_study_reports_nothing_and_nulls(db):
    study = data.attributes_study(slug="empty")
    report = analysis_of(study).build(Scope(study))
    assert report["attributes"] == {}
    assert report["score_ranking"] == {}
    assert report["agreement"]["boots"]["krippendorff_alpha"] is None
    assert report["coverage"]["items"] == 0
