"""``manage.py bias_report``: its JSON contract, and the CSV and Markdown layouts."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from django.core.management import CommandError, call_command

from studies.models import Question
from tests.factories import ItemFactory, PromptFactory, StudyFactory


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("bias_report", *args, stdout=out)
    return out.getvalue()


def is_fraction(value) -> bool:
    return isinstance(value, float) and 0.0 <= value <= 1.0


def is_fraction_or_null(value) -> bool:
    return value is None or is_fraction(value)


def is_interval(value) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, float) and math.isfinite(v) for v in value)
        and value[0] <= value[1]
    )


def assert_contract(report: dict) -> None:
    """Shape and types of the JSON contract (extra keys allowed, none of these missing)."""
    assert set(report) == {"coverage", "agreement", "human", "detectors", "judges", "judge_versions"}
    assert all(isinstance(report["coverage"][k], int) for k in ("images", "final_labels"))
    assert report["agreement"]["cohen_kappa"] is None or isinstance(report["agreement"]["cohen_kappa"], float)
    assert isinstance(report["agreement"]["n_images"], int)
    for model, human in report["human"].items():
        assert isinstance(model, str)
        assert is_fraction_or_null(human["model_bias_score"])
        assert human["ci95"] is None or is_interval(human["ci95"])
        assert all(isinstance(c, str) and is_fraction_or_null(v) for c, v in human["categories"].items())
        assert set(human["label_shares"]) == {"male", "female", "low_quality", "other"}
        assert all(is_fraction(v) for v in human["label_shares"].values())
        for prompt in human["prompts"]:
            assert all(isinstance(prompt[k], str) for k in ("category", "word", "prompt"))
            assert all(isinstance(prompt[k], int) for k in ("n_male", "n_female", "n_low_quality", "n_other"))
            score = prompt["prompt_bias_score"]
            assert score is None or (isinstance(score, float) and -1.0 <= score <= 1.0)
    for key, detector in report["detectors"].items():
        assert isinstance(key, str)
        f = detector["filtering"]
        assert all(is_fraction_or_null(f[k]) for k in ("precision", "recall", "f1", "filter_rate"))
        assert all(isinstance(f[k], int) for k in ("tp", "fp", "fn", "tn"))
        assert all(is_fraction_or_null(detector["accuracy"][k]) for k in ("male", "female", "overall"))
        for model, part in detector["per_model"].items():
            assert isinstance(model, str)
            assert is_fraction_or_null(part["model_bias_score"])
            assert part["pct_diff"] is None or isinstance(part["pct_diff"], float)
            assert is_fraction_or_null(part["prompt_bias_score_difference"])
            assert part["ci95"] is None or is_interval(part["ci95"])


def test_json_follows_the_contract_with_the_fixture_numbers(report_study):
    report = json.loads(run("--format", "json", "--study", "gender", "--bootstrap", "200"))
    assert_contract(report)
    assert report["coverage"] == {"images": 15, "final_labels": 14}
    assert report["human"]["sdxl"]["model_bias_score"] == pytest.approx(0.75)
    assert report["human"]["sd3"]["model_bias_score"] == 0.0
    fake = report["detectors"]["fake"]
    assert (
        fake["filtering"]["tp"],
        fake["filtering"]["fp"],
        fake["filtering"]["fn"],
        fake["filtering"]["tn"],
    ) == (
        9,
        1,
        1,
        3,
    )
    assert fake["per_model"]["sdxl"]["pct_diff"] == pytest.approx(-20.0)
    assert fake["per_model"]["sd3"]["pct_diff"] is None
    assert is_interval(fake["per_model"]["sdxl"]["ci95"])


def test_json_defaults_to_the_only_study_and_filters_by_model_and_detector(report_study):
    report = json.loads(run("--t2i-model", "sdxl", "--detector", "fake", "--bootstrap", "0"))
    assert_contract(report)
    assert list(report["human"]) == ["sdxl"]
    assert list(report["detectors"]) == ["fake"]
    assert report["human"]["sdxl"]["ci95"] is None


def test_csv_has_a_row_per_source_and_model_then_detectors_then_prompts(report_study):
    models, detectors, prompts = (
        list(csv.reader(io.StringIO(run("--format", "csv", "--bootstrap", "0", "--table", name))))
        for name in ("models", "detectors", "prompts")
    )
    assert models[0][:4] == ["section", "source", "t2i_model", "model_bias_score"]
    by_source = {(r[1], r[2]): r for r in models[1:]}
    assert set(by_source) == {
        ("human", "sd3"),
        ("human", "sdxl"),
        ("blind", "sdxl"),
        ("fake", "sd3"),
        ("fake", "sdxl"),
    }
    assert float(by_source[("human", "sdxl")][3]) == pytest.approx(0.75)
    assert float(by_source[("fake", "sdxl")][6]) == pytest.approx(-20.0)
    assert by_source[("fake", "sd3")][6] == ""  # pct_diff undefined: human score 0
    assert [r[1] for r in detectors[1:]] == ["blind", "fake"]
    assert detectors[2][7:11] == ["9", "1", "1", "3"]
    assert prompts[0][0] == "section"
    assert len(prompts) == 1 + 4  # sdxl gym, doctor, nurse; sd3 doctor


def test_markdown_shows_the_papers_tables_as_the_dashboard_does(report_study):
    text = run("--format", "md", "--bootstrap", "0")
    assert text.startswith("# Bias report")
    for title in ("table 1", "table 2", "table 3", "table 5", "table 6", "table 7"):
        assert f"({title})" in text
    # Table 1 per model (sd3, then sdxl): score, CI, Δ, Δ CI, n. Humans see no bias on sd3, so
    # the percentage there is undefined (en dash).
    assert "| Source | sd3 Score | sd3 95 % CI | sd3 \u0394 vs human |" in text
    assert (
        "| fake | 0.500 | \u2013 | \u2013 | \u2013 | 4 | 0.600 | \u2013 | -20.00 % ↓ | \u2013 | 10 |" in text
    )
    # Table 7 carries every detector's prompt scores beside the human one.
    assert "| Category | Word | Prompt | sd3 Human | sd3 blind | sd3 fake | sdxl Human |" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--study", "nope"), "No study with slug 'nope' (existing studies: gender)"),
        (
            ("--t2i-model", "dalle", "--study", "gender"),
            "No images of T2I model 'dalle' (T2I models: sd3, sdxl)",
        ),
        (("--t2i-model", "dalle"), "No images of T2I model 'dalle'"),
        (("--detector", "face++"), "No predictions of detector 'face++' (detectors: blind, fake)"),
        (("--bootstrap", "-1"), "--bootstrap must be 0 or more"),
    ],
)
def test_unknown_filters_get_a_clear_error(report_study, args, message):
    with pytest.raises(
        CommandError, match=message.replace("+", r"\+").replace("(", r"\(").replace(")", r"\)")
    ):
        run(*args)


def test_markdown_says_why_it_is_empty_before_any_final_label(study):
    ItemFactory(prompt=PromptFactory(study=study))
    text = run("--format", "md", "--study", study.slug)
    assert "No image has a final label yet" in text


def test_with_several_studies_the_study_must_be_named(report_study):
    StudyFactory(slug="second")
    with pytest.raises(
        CommandError, match=r"several studies: choose one with --study \(existing studies: gender, second\)"
    ):
        run("--bootstrap", "0")
    assert "human" in json.loads(run("--study", "gender", "--bootstrap", "0"))


def test_a_study_whose_protocol_has_no_report_yet_gets_a_clear_error(db, unreported_protocol):
    StudyFactory(slug="shoes", protocol=unreported_protocol)
    with pytest.raises(CommandError, match=f"Studies of protocol '{unreported_protocol}' have no report yet"):
        run("--study", "shoes")


def test_a_gender_study_without_two_clear_answers_gets_a_clear_error(study):
    Question.objects.filter(study=study, key="gender").update(
        choices=[
            {"value": "male", "name": "Male", "key": "m", "clear": True},
            {"value": "female", "name": "F", "key": "f"},
        ]
    )
    with pytest.raises(CommandError, match="marks 1 choices as clear"):
        run("--study", study.slug)


def test_json_keys_are_exactly_the_typed_contract(report_study):
    """The TypedDicts in protocols/gender/contract.py are the keys the command prints,
    at every level, so the types mypy checks are the JSON scripts read."""
    from typing import get_type_hints

    from protocols.gender import contract

    def keys(typed: type) -> set[str]:
        return set(get_type_hints(typed))

    report = json.loads(run("--format", "json", "--study", "gender", "--bootstrap", "50"))
    assert set(report) == keys(contract.GenderReport)
    assert set(report["coverage"]) == keys(contract.Coverage)
    assert set(report["agreement"]) == keys(contract.Agreement)
    for human in report["human"].values():
        assert set(human) == keys(contract.HumanModel)
    for detector in report["detectors"].values():
        assert set(detector) == keys(contract.Detector)
        assert set(detector["filtering"]) == keys(contract.Filtering)
        assert set(detector["accuracy"]) == keys(contract.Accuracy)
        for per_model in detector["per_model"].values():
            assert set(per_model) == keys(contract.DetectorModel)
    assert report["detectors"], "the fixture has a detector, so every level was checked"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("", "--format csv prints one table"),
        ("model", "The gender report has no table 'model'"),
    ],
)
def test_csv_without_a_known_table_lists_the_tables(report_study, table, message):
    with pytest.raises(CommandError) as refused:
        run("--format", "csv", "--bootstrap", "0", *(["--table", table] if table else []))
    assert message in str(refused.value)
    assert "choose one with --table NAME, one of models, detectors, prompts" in str(refused.value)


def test_table_is_only_for_csv(report_study):
    with pytest.raises(CommandError, match="--table is for --format csv"):
        run("--format", "json", "--table", "models")


def test_each_csv_table_is_one_file_pandas_reads_as_it_is(report_study, tmp_path):
    pandas = pytest.importorskip("pandas")
    out = tmp_path / "detectors.csv"
    run("--format", "csv", "--bootstrap", "0", "--table", "detectors", "--output", str(out))
    frame = pandas.read_csv(out)
    assert list(frame["section"]) == ["detectors", "detectors"]
    assert list(frame.iloc[:, 1]) == ["blind", "fake"]


def test_the_contracts_page_lists_each_protocol_s_csv_tables():
    from pathlib import Path

    from django.conf import settings

    from reports.analyses import ANALYSES, analysis_for

    page = (Path(settings.BASE_DIR) / "docs" / "reference" / "contracts.md").read_text(encoding="utf-8")
    for protocol in ANALYSES:
        names = analysis_for(protocol).csv_tables
        assert names, protocol
        assert ", ".join(f"`{name}`" for name in names) + " |" in page, protocol
