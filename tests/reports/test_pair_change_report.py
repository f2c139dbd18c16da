"""The pair-change report: ``bias_report --format json`` on the hand-worked study of
``pair_change_data``, the choice of the detector measuring each attribute, the human check of
the automatic verdicts, and bad input named by its pair."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from statsmodels.stats import proportion

from annotate.models import FinalLabel
from detectors.models import Prediction
from protocols.pair_change.sampling import pairs_sample
from reports.analyses import AnalysisError, analysis_of
from reports.selectors import Scope
from studies.models import ImageRole, ItemImage, Question
from tests.factories import (
    FinalLabelFactory,
    ImageFactory,
    PairItemFactory,
    StudyFactory,
    image_of,
    question_of,
)
from tests.reports.pair_change_data import AGE_GENDER, SKIN, add_pair, build, measure, pair_key

pytestmark = pytest.mark.django_db


def bias_report(**options: object) -> dict:
    out = io.StringIO()
    call_command("bias_report", format="json", stdout=out, **options)
    return json.loads(out.getvalue())


def compute(study, **options):
    return analysis_of(study).compute(Scope(study), **options)


# --- the JSON contract -----------------------------------------------------------------------------


def test_bias_report_prints_the_hand_worked_domain_word_and_model_figures():
    build()
    report = bias_report(study="bp")
    sd15 = report["pair_change"]["sd15"]
    assert sd15["sources"] == {"age": AGE_GENDER, "gender": AGE_GENDER, "skin": SKIN}
    assert sd15["thresholds"] == {"age": 25.0, "skin": 20.0}
    assert sd15["model_score"] == pytest.approx(2.34 / 6)
    assert list(sd15["domains"]) == ["personality", "profession"]  # the paper's domain order
    profession = sd15["domains"]["profession"]
    assert profession["age"] == {
        "pair_mean_abs": pytest.approx(0.64),
        "word_mean_abs": pytest.approx(0.52),
        "n_pairs": 4,
        "n_unmeasured": 0,
    }
    assert profession["gender"]["pair_mean_abs"] == pytest.approx(0.5)
    assert profession["skin"]["pair_mean_abs"] == pytest.approx(0.8)
    personality = sd15["domains"]["personality"]
    assert personality["age"]["pair_mean_abs"] == pytest.approx(0.3)
    assert personality["skin"]["n_unmeasured"] == 1  # brave/S1: no face in the edit, scored 0
    assert sd15["words"]["nurse"] == {
        "domain": "profession",
        "age": pytest.approx(0.6),
        "gender": 0.5,
        "gender_m2f": 1.0,
        "gender_f2m": 0.0,
        "skin": pytest.approx(0.75),
        "n_pairs": 2,
    }
    assert sd15["words"]["pilot"]["skin"] == pytest.approx(-0.85)
    assert sd15["words"]["pilot"]["gender_f2m"] == 1.0
    # p2p has only a male seed for nurse: its female-to-male rate is undefined, not 0.
    assert report["pair_change"]["p2p"]["words"]["nurse"]["gender_f2m"] is None
    assert report["pair_change"]["p2p"]["model_score"] == 0.0
    assert report["coverage"] == {"pairs": 7, "pairs_scored": 7, "pairs_left_out": 0, "left_out_reasons": {}}
    assert set(report["validation"]) == {"age", "gender", "skin"}
    assert report["validation"]["age"]["accuracy"] is None
    assert report["validation"]["age"]["n"] == 0


def test_the_study_thresholds_divide_the_differences():
    fixture = build()
    fixture.study.parameters = {"thresholds": {"age": 50, "skin": 10}}
    fixture.study.save()
    sd15 = bias_report(study="bp", t2i_model="sd15")["pair_change"]
    assert list(sd15) == ["sd15"]
    profession = sd15["sd15"]["domains"]["profession"]
    assert sd15["sd15"]["thresholds"] == {"age": 50.0, "skin": 10.0}
    assert profession["age"]["pair_mean_abs"] == pytest.approx(0.32)  # 64 years / 4 pairs / 50
    assert profession["skin"]["pair_mean_abs"] == pytest.approx(1.6)  # 64 gray levels / 4 / 10


def test_a_threshold_that_is_not_positive_is_refused_by_name():
    fixture = build()
    fixture.study.parameters = {"thresholds": {"age": 0}}
    fixture.study.save()
    with pytest.raises(
        CommandError, match=r"parameters.thresholds: age threshold 0 is not a positive number"
    ):
        bias_report(study="bp")


def test_a_pair_without_measurements_yet_is_left_out_and_counted():
    fixture = build()
    add_pair(fixture.study, "sd15", "profession", "nurse", fixture.seeds["S1"], "S1b", None, measured=False)
    report = bias_report(study="bp")
    assert report["coverage"]["pairs"] == 8
    assert report["coverage"]["pairs_left_out"] == 1
    assert report["coverage"]["left_out_reasons"] == {f"not measured by {AGE_GENDER} yet": 1}
    assert report["pair_change"]["sd15"]["domains"]["profession"]["age"]["n_pairs"] == 4


def test_csv_and_markdown_exports_carry_table_3_and_the_word_lists():
    build()
    sections = []
    for table in ("bias_by_domain", "word_mean", "biased_words"):
        out = io.StringIO()
        call_command("bias_report", study="bp", format="csv", table=table, stdout=out)
        sections.append(out.getvalue())
    model_bias = list(csv.DictReader(io.StringIO(sections[0])))
    row = next(r for r in model_bias if r["t2i_model"] == "sd15" and r["domain"] == "profession")
    assert row["section"] == "bias_by_domain"
    assert float(row["age"]) == pytest.approx(0.64)
    assert float(row["model_score"]) == pytest.approx(0.39)
    words = list(csv.DictReader(io.StringIO(sections[2])))
    first = next(
        r for r in words if r["t2i_model"] == "sd15" and r["domain"] == "profession" and r["rank"] == "1"
    )
    assert (first["m2f_word"], first["f2m_word"], first["older_word"], first["younger_word"]) == (
        "nurse",
        "pilot",
        "nurse",
        "pilot",
    )
    assert (first["lighter_word"], first["darker_word"]) == ("nurse", "pilot")
    md = io.StringIO()
    call_command("bias_report", study="bp", format="md", stdout=md)
    text = md.getvalue()
    assert "## Model bias per domain and attribute (Table 3)" in text
    assert f"age by {AGE_GENDER}@1" in text


# --- which detector measures what -----------------------------------------------------------------


def _second_age_detector(fixture) -> None:
    """facepp_measure measures age and gender of every image, each 10 years older than face_age_gender."""
    for item in fixture.pairs.values():
        for role in (ImageRole.INPUT, ImageRole.OUTPUT):
            image = image_of(item, role)
            if Prediction.objects.filter(image=image, detector="facepp_measure").exists():
                continue
            mine = Prediction.objects.get(image=image, detector=AGE_GENDER).output
            measure(
                image,
                "facepp_measure",
                face=mine["face"],
                age=None if mine["age"] is None else mine["age"] + 10,
                gender=mine["gender"],
            )


def test_two_detectors_measuring_age_and_no_choice_is_a_clear_error():
    fixture = build()
    _second_age_detector(fixture)
    with pytest.raises(
        CommandError, match=r"Several detectors measure age in study 'bp': face_age_gender, facepp_measure"
    ):
        bias_report(study="bp")


def test_the_measure_choice_picks_the_source_per_attribute():
    fixture = build()
    _second_age_detector(fixture)
    result = compute(fixture.study, measure="age=facepp_measure,gender=face_age_gender")
    assert result.report["pair_change"]["sd15"]["sources"] == {
        "age": "facepp_measure",
        "gender": AGE_GENDER,
        "skin": SKIN,
    }
    assert result.report["detector_versions"] == {
        "face_age_gender": "1",
        "facepp_measure": "1",
        "skin_tone": "1",
    }
    # The same differences, so the same figures: the source is what changed.
    assert result.report["pair_change"]["sd15"]["domains"]["profession"]["age"][
        "pair_mean_abs"
    ] == pytest.approx(0.64)


def test_the_study_parameter_measure_settles_two_candidates():
    fixture = build()
    _second_age_detector(fixture)
    fixture.study.parameters = {"measure": {"age": "facepp_measure", "gender": "facepp_measure"}}
    fixture.study.save()
    assert compute(fixture.study).sources.sources == {
        "age": "facepp_measure",
        "gender": "facepp_measure",
        "skin": SKIN,
    }


@pytest.mark.parametrize(
    ("measure_text", "message"),
    [
        (
            "age=skin_tone",
            r"Detector 'skin_tone' measures no age in study 'bp' \(detectors that do: face_age_gender\)",
        ),
        ("height=face_age_gender", r"--measure names 'height': the attributes are age, gender, skin"),
        ("age", r"--measure part 'age' is not attribute=detector"),
    ],
)
def test_a_measure_choice_that_does_not_fit_is_refused(measure_text, message):
    fixture = build()
    with pytest.raises(AnalysisError, match=message):
        compute(fixture.study, measure=measure_text)


def test_the_detector_filter_leaves_the_attributes_it_does_not_measure_null():
    fixture = build()
    sd15 = compute(fixture.study, detector=SKIN).report["pair_change"]["sd15"]
    assert sd15["sources"] == {"age": None, "gender": None, "skin": SKIN}
    profession = sd15["domains"]["profession"]
    assert profession["age"] == {
        "pair_mean_abs": None,
        "word_mean_abs": None,
        "n_pairs": 4,
        "n_unmeasured": 4,
    }
    assert profession["skin"]["pair_mean_abs"] == pytest.approx(0.8)
    assert sd15["words"]["nurse"]["gender_m2f"] is None
    assert sd15["model_score"] is None  # an average over a partial grid is not the paper's Ave


def test_bias_report_measure_option_reaches_the_analysis():
    fixture = build()
    _second_age_detector(fixture)
    report = bias_report(study="bp", measure="age=facepp_measure,gender=facepp_measure")
    assert report["pair_change"]["sd15"]["sources"]["age"] == "facepp_measure"


# --- bad input, named by its pair ------------------------------------------------------------------


def test_a_pair_without_an_edited_image_is_named():
    fixture = build()
    ItemImage.objects.filter(
        item=fixture.pairs[pair_key("sd15", "pilot", "S2")], role=ImageRole.OUTPUT
    ).delete()
    with pytest.raises(
        CommandError, match=r"pair 'sd15/pilot/S2' has no edited image \(an image of role output\)"
    ):
        bias_report(study="bp")


def test_a_pair_without_a_seed_photo_is_named():
    fixture = build()
    ItemImage.objects.filter(
        item=fixture.pairs[pair_key("sd15", "brave", "S2")], role=ImageRole.INPUT
    ).delete()
    with pytest.raises(CommandError, match=r"pair 'sd15/brave/S2' has no seed photo"):
        bias_report(study="bp")


def test_a_seed_photo_without_a_face_is_named():
    fixture = build()
    faceless = ImageFactory()
    measure(faceless, AGE_GENDER, face=False)
    measure(faceless, SKIN, face=False)
    add_pair(fixture.study, "sd15", "profession", "nurse", faceless, "S9", ("female", 30.0, 100.0))
    with pytest.raises(
        CommandError, match=r"pair 'sd15/nurse/S9': face_age_gender found no face in the seed photo"
    ):
        bias_report(study="bp")


def test_an_edit_the_detector_could_not_decode_is_named_with_the_error():
    fixture = build()
    broken = ImageFactory()
    measure(broken, AGE_GENDER, failed="cannot identify image file")
    measure(broken, SKIN, skin_gray=90.0)
    item = PairItemFactory(
        study=fixture.study,
        prompt=fixture.pairs[pair_key("sd15", "nurse", "S1")].prompt,
        t2i_model="sd15",
        key="sd15/nurse/broken",
        image=broken,
        image__input=fixture.seeds["S1"],
    )
    assert item.pk
    with pytest.raises(
        CommandError,
        match=r"pair 'sd15/nurse/broken': the edited image could not be measured by face_age_gender@1: "
        r"cannot identify image file",
    ):
        bias_report(study="bp")


def test_a_measurement_outside_its_range_is_named():
    fixture = build()
    # Written past the validation (e.g. by SQL): the report checks every value again.
    image = image_of(fixture.pairs[pair_key("sd15", "pilot", "S1")], ImageRole.OUTPUT)
    prediction = Prediction.objects.get(image=image, detector=AGE_GENDER)
    Prediction.objects.filter(pk=prediction.pk).update(output={**prediction.output, "age": 130})
    with pytest.raises(
        CommandError, match=r"pair 'sd15/pilot/S1', edited image measured by face_age_gender: age 130"
    ):
        bias_report(study="bp")
    Prediction.objects.filter(pk=prediction.pk).update(output=prediction.output)
    skin = Prediction.objects.get(image=image, detector=SKIN)
    Prediction.objects.filter(pk=skin.pk).update(output={**skin.output, "skin_gray": -3})
    with pytest.raises(CommandError, match=r"skin_gray -3 is outside 0-255 gray levels"):
        bias_report(study="bp")


def test_a_pair_whose_word_is_not_in_the_prompt_set_is_named():
    fixture = build()
    PairItemFactory(study=fixture.study, prompt=None, key="loose-pair", image__input=fixture.seeds["S2"])
    with pytest.raises(
        CommandError, match=r"pair 'loose-pair' has no prompt word: its word is not in the study's prompt set"
    ):
        bias_report(study="bp")


def test_a_question_whose_answers_do_not_match_the_verdicts_is_refused():
    study = StudyFactory(slug="odd", protocol="pair_change")
    skin = Question.objects.get(study=study, key="skin")
    skin.choices = [c for c in skin.choices if c["value"] != "darker"]
    skin.save()
    with pytest.raises(AnalysisError, match=r"Question 'skin' of study 'odd' has the answers lighter, same"):
        analysis_of(study)


# --- the human check ---------------------------------------------------------------------------------


def test_validation_scores_the_drawn_verdicts_against_the_final_answers():
    fixture = build()
    pairs_sample(
        study=fixture.study, attribute="age", sizes={"older": 1, "younger": 1, "unchanged": 2}, seed=3
    )
    pairs_sample(study=fixture.study, attribute="gender", sizes={"male_to_female": 1, "unchanged": 2}, seed=3)
    p = fixture.pairs
    age = question_of(p[pair_key("sd15", "nurse", "S1")], "age")
    gender = question_of(p[pair_key("sd15", "nurse", "S1")], "gender")
    # Age: older right, younger judged "no change", one unchanged right, one not answered yet.
    FinalLabelFactory(item=p[pair_key("sd15", "nurse", "S1")], question=age, value="older")
    FinalLabelFactory(item=p[pair_key("sd15", "pilot", "S1")], question=age, value="same")
    FinalLabelFactory(item=p[pair_key("sd15", "nurse", "S2")], question=age, value="same")
    # Gender: nurse/S1 (male -> female) confirmed.
    FinalLabelFactory(item=p[pair_key("sd15", "nurse", "S1")], question=gender, value="male_female")
    report = bias_report(study="bp")
    age_check = report["validation"]["age"]
    assert age_check["n"] == 3
    assert age_check["n_drawn"] == 4
    assert age_check["n_unanswered"] == 1
    assert age_check["accuracy"] == pytest.approx(2 / 3)
    low, high = proportion.proportion_confint(2, 3, alpha=0.05, method="wilson")
    assert age_check["ci95"] == [pytest.approx(low), pytest.approx(high)]
    assert age_check["confusion"]["younger"] == {"older": 0, "younger": 0, "unchanged": 1}
    assert age_check["confusion"]["older"]["older"] == 1
    assert age_check["buckets"]["younger"] == {
        "accuracy": 0.0,
        "ci95": [0.0, pytest.approx(0.7934, abs=1e-4)],
        "n": 1,
    }
    assert report["validation"]["gender"]["accuracy"] == 1.0
    assert report["validation"]["skin"]["n"] == 0
    assert report["validation"]["skin"]["accuracy"] is None
    assert report["validation_overall"]["n"] == 4
    assert report["validation_overall"]["accuracy"] == pytest.approx(3 / 4)
    assert [s["attribute"] for s in report["samples"]] == ["age", "gender"]
    # The T2I model filter narrows the check to that model's pairs (p2p's nurse was drawn).
    p2p = bias_report(study="bp", t2i_model="p2p")["validation"]["age"]
    assert p2p["n_drawn"] == 1
    assert p2p["n"] == 0


def test_a_final_answer_outside_the_choices_is_named():
    fixture = build()
    pairs_sample(study=fixture.study, attribute="age", sizes={"older": 1}, seed=0)
    item = fixture.pairs[pair_key("sd15", "nurse", "S1")]
    FinalLabel.objects.create(
        item=item,
        question=question_of(item, "age"),
        value="ancient",
        source="imported",
        decided_at=timezone.now(),
    )
    with pytest.raises(
        CommandError, match=r"pair 'sd15/nurse/S1': final answer 'ancient' to 'age' is not one of its choices"
    ):
        bias_report(study="bp")
