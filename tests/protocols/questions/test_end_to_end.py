"""The questions protocol from the command line: create_study with a questions
CSV and a compared column, import_images refusing a row without it, labels, detector answers
(kind ``answers``, unknown questions and answers refused per row), bias_report in json, csv, md."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command

from annotate.models import FinalLabel
from detectors.models import Prediction
from studies.models import Item, Study
from tests.protocols.questions.data import AGE, SKIN, WEALTH, manifest, questions_csv
from tests.studies.protocol_data import write_csv

pytestmark = pytest.mark.django_db


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def create(tmp_path, *extra: str) -> str:
    return command(
        "create_study", "qs", "--protocol", "questions", "--questions", str(questions_csv(tmp_path)), *extra
    )


def test_create_study_keeps_the_compared_column_with_the_study(tmp_path):
    out = create(tmp_path, "--compare", "skin", "--labels-per-item", "2")
    assert out.startswith("Created study 'qs' (questions, 2 question(s), 2 labels per item")
    study = Study.objects.get(slug="qs")
    assert study.parameters == {"compare": "skin"}
    assert study.get_protocol_display().startswith("Questions from a CSV")
    # The same definition again changes nothing; another column is applied before labels.
    assert "nothing changed" in create(tmp_path, "--compare", "skin")
    assert "parameters" in create(tmp_path, "--compare", "word")
    assert Study.objects.get(slug="qs").parameters == {"compare": "word"}


def test_create_study_refuses_a_questions_study_without_its_column_or_questions(tmp_path):
    with pytest.raises(CommandError, match="needs --compare"):
        create(tmp_path)
    with pytest.raises(CommandError, match="no preset questions: give them with --questions"):
        command("create_study", "qs", "--protocol", "questions", "--compare", "skin")
    with pytest.raises(CommandError, match="--compare is not an option of a gender study"):
        command("create_study", "g", "--protocol", "gender", "--compare", "skin")
    boxes = write_csv(
        tmp_path / "toggle.csv",
        ["key", "text", "choices", "kind"],
        [["hat", "Hat?", "yes:Yes|no:No", "toggle"]],
    )
    with pytest.raises(CommandError, match="every question must be single-choice"):
        command(
            "create_study", "qs", "--protocol", "questions", "--questions", str(boxes), "--compare", "skin"
        )
    assert not Study.objects.exists()


def test_import_refuses_a_row_without_the_compared_column_naming_it(tmp_path):
    create(tmp_path, "--compare", "skin")
    skin = list(SKIN)
    skin[4] = ""
    path, root = manifest(tmp_path, skin=skin)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command(
            "import_images", "--manifest", str(path), "--root", str(root), "--study", "qs", stdout=out
        )
    text = out.getvalue()
    assert "row 6" in text, text
    assert "column 'skin' is empty or missing" in text, text
    assert not Item.objects.filter(key="4.png").exists()


def _labels(tmp_path):
    rows = []
    for i, (age, wealth) in enumerate(zip(AGE, WEALTH, strict=True)):
        for annotator in ("anna", "ben"):
            second_age = "old" if (i == 11 and annotator == "ben") else age
            rows.append([f"{i}.png", annotator, "age", second_age])
            rows.append([f"{i}.png", annotator, "wealth", wealth])
    return write_csv(tmp_path / "labels.csv", ["image", "annotator", "question", "label"], rows)


def _study_with_labels(tmp_path):
    create(tmp_path, "--compare", "skin", "--labels-per-item", "2")
    path, root = manifest(tmp_path)
    assert "accepted: 12 images" in command(
        "import_images", "--manifest", str(path), "--root", str(root), "--study", "qs"
    )
    command("import_labels", str(_labels(tmp_path)), "--study", "qs", "--add-annotators")


def test_labels_agree_into_final_labels_per_question(tmp_path):
    _study_with_labels(tmp_path)
    finals = {
        (f.item.key, f.question.key): f.value for f in FinalLabel.objects.select_related("item", "question")
    }
    assert finals[("0.png", "age")] == "young"
    assert finals[("1.png", "wealth")] == "poor"
    assert ("11.png", "age") not in finals  # the two annotators disagree: a dispute
    assert finals[("11.png", "wealth")] == "poor"


def _predictions(tmp_path, rows):
    return write_csv(tmp_path / "predictions.csv", ["image", "detector", "kind", "output"], rows)


def test_import_predictions_of_kind_answers_refuses_unknown_questions_and_answers(tmp_path):
    _study_with_labels(tmp_path)
    bad = _predictions(
        tmp_path,
        [
            ["0.png", "llava", "answers", json.dumps({"age": "young"})],
            ["1.png", "llava", "answers", json.dumps({"height": "tall"})],
            ["2.png", "llava", "answers", json.dumps({"age": "ancient"})],
            ["3.png", "llava", "answers", json.dumps({"age": 3})],
        ],
    )
    with pytest.raises(CommandError) as caught:
        command("import_predictions", str(bad), "--study", "qs")
    text = str(caught.value)
    assert "line 3" in text, text
    assert "height: unknown question" in text, text
    assert "line 4" in text, text
    assert "unknown answer 'ancient'" in text, text
    assert "line 5" in text, text
    assert "must be a non-empty string" in text, text
    assert "line 2" not in text
    assert not Prediction.objects.exists()


def _import_answers(tmp_path):
    rows = []
    for i in range(12):
        said = {"age": "young" if i % 2 == 0 else AGE[i], "wealth": WEALTH[i]}
        rows.append([f"{i}.png", "llava", "answers", json.dumps(said)])
    command("import_predictions", str(_predictions(tmp_path, rows)), "--study", "qs")


def test_bias_report_json_follows_the_contract(tmp_path):
    _study_with_labels(tmp_path)
    _import_answers(tmp_path)
    assert Prediction.objects.filter(kind="answers").count() == 12
    report = json.loads(command("bias_report", "--study", "qs", "--format", "json"))
    assert set(report) == {"questions", "agreement", "detectors", "judges", "judge_versions"}
    cell = report["questions"]["age"]["dalle"]
    assert set(cell) == {"groups", "chi2", "dof", "p_value", "cramers_v", "max_gap", "judges"}
    assert set(cell["judges"]) == {"llava@imported"}
    # dalle: images 0, 3, 6, 9 (i % 3 == 0): light 0, 6 → young, middle; dark 3, 9 → old, old.
    assert cell["groups"]["light"]["n"] == 2
    assert cell["groups"]["light"]["shares"] == {"young": 0.5, "middle": 0.5, "old": 0.0}
    assert cell["groups"]["dark"]["shares"]["old"] == 1.0
    assert cell["max_gap"] == {"young": 0.5, "middle": 0.5, "old": 1.0}
    lo, hi = cell["groups"]["light"]["ci95"]["young"]
    assert 0 < lo < 0.5 < hi < 1
    # sdxl: image 11's age is disputed, so dark has 3 of 4 items.
    sdxl = report["questions"]["age"]["sdxl"]
    assert sdxl["groups"]["dark"]["n"] == 3
    assert sdxl["groups"]["light"]["n"] == 4
    agreement = report["agreement"]["age"]
    assert agreement["n_items"] == 12
    assert agreement["observed_agreement"] == pytest.approx(11 / 12)
    assert report["agreement"]["wealth"]["fleiss_kappa"] == pytest.approx(1.0)
    llava = report["detectors"]["llava"]
    assert llava["age"]["n"] == 11
    assert llava["wealth"]["n"] == 12
    assert llava["wealth"]["accuracy"] == 1.0
    assert llava["wealth"]["cohen_kappa"] == pytest.approx(1.0)
    assert set(llava["age"]["groups"]) == {"light", "dark"}
    # The test of each cell is SciPy's on the counts behind its shares.
    from scipy.stats import chi2_contingency

    table = [
        [round(g["n"] * g["shares"][a]) for a in ("young", "middle", "old")] for g in sdxl["groups"].values()
    ]
    table = [[row[j] for j in range(3) if any(r[j] for r in table)] for row in table]
    expected = chi2_contingency(table, correction=False)
    assert (sdxl["chi2"], sdxl["dof"]) == (pytest.approx(expected.statistic), expected.dof)
    assert sdxl["p_value"] == pytest.approx(expected.pvalue)


def test_the_ground_truth_export_has_every_question_of_every_image(tmp_path):
    _study_with_labels(tmp_path)
    target = tmp_path / "export.csv"
    command("export_ground_truth", "--study", "qs", "--output", str(target))
    rows = list(csv.DictReader(target.open(encoding="utf-8")))
    assert len(rows) == 24  # 12 images x 2 questions
    wealth = next(r for r in rows if r["question"] == "wealth" and r["image"].endswith("1.png"))
    assert wealth["final_label"] == "poor"


def test_bias_report_csv_and_md(tmp_path):
    _study_with_labels(tmp_path)
    _import_answers(tmp_path)
    rows = [
        row
        for table in ("shares", "tests", "agreement", "detectors")
        for row in csv.reader(
            io.StringIO(command("bias_report", "--study", "qs", "--format", "csv", "--table", table))
        )
    ]
    sections = {row[0] for row in rows if row and row[0] != "section"}
    assert sections == {"shares", "tests", "agreement", "detectors"}
    share = next(r for r in rows if r[:5] == ["shares", "age", "dalle", "dark", "old"])
    assert float(share[6]) == 1.0
    md = command("bias_report", "--study", "qs", "--format", "md")
    assert "# Questions report (groups: skin)" in md
    assert "## age: How old does the person look?" in md
    assert "χ² =" in md
    assert "| llava@imported | wealth | 12 | 1.000 | 1.000 |" in md
