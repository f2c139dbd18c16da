"""The schema of each output kind (detectors.kinds): pure functions, no database."""

from __future__ import annotations

import math

import pytest

from detectors.base import DetectorOutput
from detectors.kinds import (
    KIND_ATTRIBUTES,
    KIND_GENDER,
    KIND_MEASUREMENTS,
    KIND_OBJECTS,
    KINDS,
    OutputInvalid,
    output_validate,
    validate_attributes,
    validate_gender,
    validate_measurements,
    validate_objects,
)
from detectors.models import Prediction
from studies.protocols import PROTOCOLS


def test_the_kinds_are_the_models_output_kinds_and_cover_every_protocol():
    # Prediction.kind takes its choices from the registry (a protocol's own kind needs no migration).
    assert set(KINDS) == {value for value, _ in Prediction._meta.get_field("kind").choices}
    assert {KIND_GENDER, KIND_ATTRIBUTES, KIND_MEASUREMENTS, KIND_OBJECTS} <= set(KINDS)
    assert {kind for spec in PROTOCOLS.values() for kind in spec.output_kinds} <= set(KINDS)


def test_an_invalid_output_is_a_value_error_naming_its_field():
    with pytest.raises(ValueError, match="label") as info:
        validate_gender({"label": "man"})
    assert isinstance(info.value, OutputInvalid)
    assert (info.value.field, str(info.value)) == (
        "label",
        "label: must be male, female or filtered, got 'man'",
    )


# --- gender --------------------------------------------------------------------------------------
def test_a_gender_output_is_normalised_with_empty_reason_and_scores_by_default():
    assert validate_gender({"label": "male"}) == {"label": "male", "reason": "", "scores": {}}
    assert validate_gender(
        {"label": "filtered", "reason": "no_face", "scores": {"n_faces": 0}, "detail": "nobody"}
    ) == {"label": "filtered", "reason": "no_face", "scores": {"n_faces": 0.0}, "detail": "nobody"}


def test_an_empty_detail_is_not_stored():
    assert "detail" not in validate_gender({"label": "female", "detail": ""})


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ([], "output: must be a JSON object, got a list"),
        ({}, "label: missing"),
        ({"label": "Male"}, "label: must be male, female or filtered, got 'Male'"),
        ({"label": "filtered"}, "reason: a filtered verdict needs one of no_face"),
        ({"label": "filtered", "reason": "blurry"}, "reason: must be one of no_face"),
        ({"label": "male", "reason": "no_face"}, "reason: only a filtered verdict has a reason"),
        ({"label": "male", "reason": 3}, "reason: must be a string, got int"),
        ({"label": "male", "scores": [0.5]}, "scores: must be a JSON object, got a list"),
        ({"label": "male", "scores": {"male": "high"}}, "scores.male: must be a number, got a string"),
        ({"label": "male", "scores": {"male": True}}, "scores.male: must be a number, got a boolean"),
        ({"label": "male", "scores": {"male": math.nan}}, "scores.male: must be a finite number"),
        ({"label": "male", "scores": {"": 1.0}}, "scores: keys must be non-empty strings"),
        ({"label": "male", "detail": 5}, "detail: must be a string"),
        ({"label": "male", "verdict": "male"}, "verdict: unknown field"),
    ],
)
def test_each_bad_gender_field_is_named(output, message):
    with pytest.raises(OutputInvalid, match="^" + message.replace("(", r"\(").replace("[", r"\[")):
        validate_gender(output)


# --- attributes ----------------------------------------------------------------------------------
def test_an_attributes_output_keeps_a_float_per_question_key():
    assert validate_attributes({"scores": {"boots": 1, "tie": 0.25}}) == {
        "scores": {"boots": 1.0, "tie": 0.25}
    }
    assert validate_attributes({"scores": {}}) == {"scores": {}}


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({}, "scores: missing"),
        ({"scores": None}, "scores: must be a JSON object, got null"),
        ({"scores": {"boots": "yes"}}, "scores.boots: must be a number, got a string"),
        ({"scores": {"boots": math.inf}}, "scores.boots: must be a finite number"),
        ({"scores": {}, "label": "male"}, "label: unknown field"),
    ],
)
def test_each_bad_attributes_field_is_named(output, message):
    with pytest.raises(OutputInvalid, match="^" + message):
        validate_attributes(output)


# --- measurements --------------------------------------------------------------------------------
def test_a_measurements_output_may_leave_any_field_unmeasured():
    full = {"face": True, "age": 34, "gender": "female", "skin_gray": 143.5}
    assert validate_measurements(full) == {"face": True, "age": 34.0, "gender": "female", "skin_gray": 143.5}
    nothing = {"face": None, "age": None, "gender": None, "skin_gray": None}
    assert validate_measurements(nothing) == nothing
    bounds = {"face": False, "age": 0, "gender": "male", "skin_gray": 255}
    assert validate_measurements(bounds)["skin_gray"] == 255.0


MEASURED = {"face": True, "age": 34.0, "gender": "female", "skin_gray": 143.5}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"face": 1}, "face: must be true, false or null, got int"),
        ({"face": "yes"}, "face: must be true, false or null, got a string"),
        ({"age": -1}, "age: must be between 0 and 120, got -1"),
        ({"age": 121.5}, "age: must be between 0 and 120, got 121.5"),
        ({"age": "34"}, "age: must be a number, got a string"),
        ({"age": False}, "age: must be a number, got a boolean"),
        ({"gender": "woman"}, "gender: must be male, female or null, got 'woman'"),
        ({"gender": "filtered"}, "gender: must be male, female or null"),
        ({"skin_gray": 256}, "skin_gray: must be between 0 and 255, got 256"),
        ({"skin_gray": -0.5}, "skin_gray: must be between 0 and 255"),
        ({"skin_gray": math.nan}, "skin_gray: must be a finite number"),
        ({"height": 180}, "height: unknown field"),
    ],
)
def test_each_bad_measurement_is_named(change, message):
    with pytest.raises(OutputInvalid, match="^" + message):
        validate_measurements({**MEASURED, **change})


def test_a_missing_measurement_must_be_written_as_null():
    with pytest.raises(OutputInvalid, match=r"^age: missing \(null when it cannot be measured\)"):
        validate_measurements({"face": True, "gender": None, "skin_gray": None})


# --- objects -------------------------------------------------------------------------------------
def test_an_objects_output_lists_instances_with_float_boxes():
    output = {"objects": [{"class": "tie", "confidence": 1, "box": [0, 0, 10, 20.5]}]}
    assert validate_objects(output) == {
        "objects": [{"class": "tie", "confidence": 1.0, "box": [0.0, 0.0, 10.0, 20.5]}]
    }
    assert validate_objects({"objects": []}) == {"objects": []}


def _instances(bad: dict) -> dict:
    good = {"class": "person", "confidence": 0.9, "box": [1, 2, 30, 40]}
    return {"objects": [good, good, {**good, **bad}]}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"box": [30, 2, 10, 40]}, "objects[2].box: x1 must be greater than x0"),
        ({"box": [1, 40, 30, 40]}, "objects[2].box: y1 must be greater than y0"),
        ({"box": [1, 2, 30]}, "objects[2].box: must be a list [x0, y0, x1, y1], got 3 values"),
        ({"box": "1,2,3,4"}, "objects[2].box: must be a list [x0, y0, x1, y1], got a string"),
        ({"box": [1, 2, "x", 4]}, "objects[2].box[2]: must be a number, got a string"),
        ({"confidence": 1.5}, "objects[2].confidence: must be between 0 and 1, got 1.5"),
        ({"confidence": -0.1}, "objects[2].confidence: must be between 0 and 1"),
        ({"class": ""}, "objects[2].class: must be a non-empty string"),
        ({"class": 7}, "objects[2].class: must be a non-empty string, got 7"),
        ({"mask": []}, "objects[2].mask: unknown field"),
    ],
)
def test_each_bad_object_field_is_named_with_its_position(bad, message):
    with pytest.raises(OutputInvalid) as info:
        validate_objects(_instances(bad))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({}, "objects: missing"),
        ({"objects": {}}, "objects: must be a list, got an object"),
        ({"objects": ["tie"]}, "objects[0]: must be a JSON object, got a string"),
        ({"objects": [{"class": "tie", "confidence": 0.5}]}, "objects[0].box: missing"),
    ],
)
def test_a_bad_objects_list_is_named(output, message):
    with pytest.raises(OutputInvalid, match="^" + message.replace("[", r"\[")):
        validate_objects(output)


# --- dispatch and DetectorOutput -----------------------------------------------------------------
def test_output_validate_dispatches_on_the_kind_and_refuses_an_unknown_one():
    assert output_validate("gender", {"label": "male"})["label"] == "male"
    assert output_validate("objects", {"objects": []}) == {"objects": []}
    with pytest.raises(
        OutputInvalid, match=r"^kind: must be one of gender, attributes, measurements, objects"
    ):
        output_validate("faces", {})


def test_a_gender_detector_output_gives_its_stored_output():
    output = DetectorOutput.filtered("no_face", {"n_faces": 0.0}, detail="empty room")
    assert output.kind == "gender"
    assert output.as_output() == {
        "label": "filtered",
        "reason": "no_face",
        "scores": {"n_faces": 0.0},
        "detail": "empty room",
    }
    assert DetectorOutput(verdict="male").as_output() == {"label": "male", "reason": "", "scores": {}}


def test_as_output_is_a_copy():
    output = DetectorOutput(verdict="male", scores={"male": 0.9})
    output.as_output()["scores"]["male"] = 0.0
    assert output.as_output()["scores"] == {"male": 0.9}


def test_an_output_of_another_kind_carries_its_data():
    output = DetectorOutput.of("measurements", {"face": True, "age": 30, "gender": None, "skin_gray": 120})
    assert output.kind == "measurements"
    assert output.as_output() == {"face": True, "age": 30.0, "gender": None, "skin_gray": 120.0}


def test_a_detector_output_is_validated_when_made():
    with pytest.raises(OutputInvalid, match=r"^reason: must be one of"):
        DetectorOutput.filtered("blurry")
    with pytest.raises(OutputInvalid, match=r"^scores\.male: must be a finite number"):
        DetectorOutput(verdict="male", scores={"male": math.nan})
    with pytest.raises(OutputInvalid, match=r"^objects\[0\]\.box: x1 must be greater than x0"):
        DetectorOutput.of("objects", {"objects": [{"class": "tie", "confidence": 0.5, "box": [5, 0, 1, 1]}]})
    with pytest.raises(ValueError, match="verdict must be one of"):
        DetectorOutput(verdict="man")
    with pytest.raises(ValueError, match="a measurements output carries everything in data"):
        DetectorOutput(verdict="male", kind="measurements")
    with pytest.raises(ValueError, match="a gender output has no data"):
        DetectorOutput(verdict="male", data={"label": "male"})
    with pytest.raises(ValueError, match="kind must be one of"):
        DetectorOutput.of("faces", {})


def test_an_output_a_json_column_cannot_store_is_invalid_naming_its_field():
    """A detector's detail with a NUL character passed the schema and then failed the whole
    PostgreSQL write: ``studies.jsonbounds`` checks every output."""
    with pytest.raises(OutputInvalid, match=r"^detail: holds a NUL character"):
        output_validate("gender", {"label": "filtered", "reason": "other", "scores": {}, "detail": "a\x00b"})
