"""``manage.py agreement``: JSON with at least cohen_kappa, observed_agreement and n_images, on
one question of one study."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command
from sklearn.metrics import cohen_kappa_score

from annotate import services
from annotate.management.commands.agreement import agreement_text
from tests.factories import ItemFactory, LabelFactory, PromptFactory, StudyFactory

PAIRS = [
    ("male", "male", "sdxl", "profession"),
    ("female", "female", "sdxl", "profession"),
    ("male", "female", "sd3", "profession"),
    ("low_quality", "low_quality", "sd3", "place"),
    ("other", "low_quality", "sd3", "place"),
]


@pytest.fixture
def labelled(study, annotator_a, annotator_b):
    prompts = {c: PromptFactory(study=study, category=c) for c in ("profession", "place")}
    for a, b, model, category in PAIRS:
        item = ItemFactory(prompt=prompts[category], t2i_model=model)
        LabelFactory(item=item, annotator=annotator_a, value=a)
        LabelFactory(item=item, annotator=annotator_b, value=b)
    # One item with a single label does not count.
    LabelFactory(item=ItemFactory(prompt=prompts["place"]), annotator=annotator_a, value="male")
    return study


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("agreement", *args, stdout=out)
    return out.getvalue()


def test_json_prints_kappa_agreement_and_count_equal_to_scikit_learn(labelled):
    report = json.loads(run("--format", "json"))
    assert isinstance(report["cohen_kappa"], float)
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    )
    assert report["observed_agreement"] == pytest.approx(3 / 5)
    assert report["n_images"] == report["n_items"] == 5
    assert (report["study"], report["question"]) == ("gender", "gender")
    assert report["labels"][:4] == ["male", "female", "low_quality", "other"]
    assert report["label_names"][:4] == ["Male", "Female", "Low quality", "Other"]
    for key in ("confusion", "per_t2i_model", "per_category", "per_annotator_pair"):
        assert key in report
    assert report["per_annotator_pair"][0]["annotators"] == ["anna", "ben"]


def test_json_filters_by_study_model_and_category(labelled):
    report = json.loads(run("--study", "gender", "--t2i-model", "sd3", "--category", "place"))
    assert report["n_images"] == 2
    assert report["observed_agreement"] == 0.5
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score(["low_quality", "other"], ["low_quality", "low_quality"])
    )


def test_text_format_reads_as_a_summary(labelled):
    text = run("--format", "text")
    assert "Study gender, question gender: Which gender" in text
    assert "Items with two or more labels: 5" in text
    assert "Observed agreement: 0.600" in text
    assert "anna & ben" in text


def test_csv_gives_the_summary_confusion_and_groups_as_sections(labelled):
    blocks = run("--format", "csv").split("\n\n")
    assert len(blocks) == 3
    summary, confusion, groups = (list(csv.reader(io.StringIO(block))) for block in blocks)
    assert summary[0] == [
        "section", "study", "question", "n_items",
        "cohen_kappa", "observed_agreement", "fleiss_kappa", "krippendorff_alpha",
    ]  # fmt: skip
    assert summary[1][:4] == ["summary", "gender", "gender", "5"]
    assert float(summary[1][4]) == pytest.approx(
        cohen_kappa_score([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    )
    assert float(summary[1][5]) == pytest.approx(3 / 5)
    assert confusion[0][:6] == ["section", "first", "male", "female", "low_quality", "other"]
    # Rows: first annotator (anna), columns: second (ben); anna said male twice, ben male once.
    male = next(row for row in confusion if row[:2] == ["confusion", "male"])
    assert male[2:4] == ["1", "1"]
    assert sum(int(n) for row in confusion[1:] for n in row[2:]) == 5
    assert groups[0] == ["section", "by", "name", "n_items", "cohen_kappa", "observed_agreement"]
    by_name = {(row[1], row[2]): row for row in groups[1:]}
    assert by_name[("t2i_model", "sdxl")][3:] == ["2", "1.0", "1.0"]
    assert by_name[("category", "place")][3] == "2"
    assert by_name[("annotator_pair", "anna & ben")][3] == "5"


def test_md_gives_the_same_figures_as_markdown_tables(labelled):
    md = run("--format", "md")
    assert md.startswith("# Agreement: study gender, question gender\n")
    assert "| 5 | " in md
    assert "| 0.600 |" in md
    assert "| Male | 1 | 1 |" in md
    assert "| annotator_pair | anna & ben | 5 |" in md
    assert sum(line.startswith("| --- |") for line in md.splitlines()) == 3  # three tables


def test_text_is_kept_as_the_plain_summary_it_printed_before_md(labelled):
    assert run("--format", "text") == agreement_text(json.loads(run()))


def test_output_writes_the_document_to_a_file_instead(labelled, tmp_path):
    target = tmp_path / "agreement.md"
    assert run("--format", "md", "--output", str(target)) == ""
    assert target.read_text(encoding="utf-8") == run("--format", "md")


def test_an_unknown_study_is_refused_with_the_known_ones(labelled):
    with pytest.raises(CommandError, match="No study with slug 'nope' \\(existing studies: gender\\)"):
        run("--study", "nope")


def test_several_studies_need_the_study_option(labelled):
    StudyFactory(slug="second")
    with pytest.raises(
        CommandError, match="several studies: choose one with --study \\(existing studies: gender, second\\)"
    ):
        run()


def test_an_unknown_model_or_category_is_refused_with_the_known_ones(labelled):
    with pytest.raises(CommandError, match="No images of T2I model 'dalle' \\(T2I models: sd3, sdxl\\)"):
        run("--t2i-model", "dalle")
    with pytest.raises(
        CommandError, match="No images of prompt category 'food' \\(categories: place, profession\\)"
    ):
        run("--category", "food")


def test_no_labels_gives_null_kappa_not_zero(study):
    report = json.loads(run("--study", "gender"))
    assert report["n_images"] == 0
    assert report["cohen_kappa"] is None
    assert report["observed_agreement"] is None


@pytest.fixture
def attributes(db, annotator_a, annotator_b):
    study = StudyFactory(slug="clothes", protocol="attributes", labels_per_item=2, agreement="unanimous")
    prompt = PromptFactory(study=study)
    questions = {q.key: q for q in study.questions.all()}
    answers = {"hat": [("yes", "yes"), ("no", "yes"), ("no", "no")], "tie": [("yes", "yes")] * 3}
    for i in range(3):
        item = ItemFactory(prompt=prompt)
        for key, pairs in answers.items():
            a, b = pairs[i]
            services.label_import(item=item, question=questions[key], annotator=annotator_a, value=a)
            services.label_import(item=item, question=questions[key], annotator=annotator_b, value=b)
    return study


def test_a_study_of_several_questions_needs_the_question_option(attributes):
    with pytest.raises(
        CommandError, match="asks 15 questions: choose one with --question \\(boots, slippers,"
    ):
        run("--study", "clothes")
    with pytest.raises(CommandError, match="has no question 'wings'"):
        run("--study", "clothes", "--question", "wings")


def test_agreement_is_computed_per_question(attributes):
    hat = json.loads(run("--study", "clothes", "--question", "hat"))
    tie = json.loads(run("--study", "clothes", "--question", "tie"))
    assert hat["cohen_kappa"] == pytest.approx(cohen_kappa_score(["yes", "no", "no"], ["yes", "yes", "no"]))
    assert hat["observed_agreement"] == pytest.approx(2 / 3)
    assert (tie["observed_agreement"], tie["n_items"], tie["question"]) == (1.0, 3, "tie")
