"""Ground-truth export, label and ground-truth import, and the export → import round trip
(issue 2, 7-8; issue 8: one row per (item, question); issue 9 items 4 and 7)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from sklearn.metrics import cohen_kappa_score

from annotate import services
from annotate.errors import ImportRejected
from annotate.exports import ground_truth_export, ground_truth_rows
from annotate.imports import REASON_NOT_EXPORTED, ground_truth_import, labels_import
from annotate.models import FinalLabel, FinalLabelSource, Label, LabelRevision
from annotate.selectors import label_rows_for_agreement
from studies import permissions
from studies.ingest import images_import
from studies.models import Item, Question, Study
from studies.services import study_define
from tests.annotate.gender import final_of, final_set, label_import, resolve
from tests.factories import ItemFactory, PairItemFactory, PromptFactory, StudyFactory, question_of
from tests.studies.protocol_data import (
    empty_database,
    export_rows,
    export_text,
    one_image_manifest,
    pair_manifest,
    write_csv,
)

User = get_user_model()


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study, category="profession", word="nurse", text="a photo of a nurse")
    return [ItemFactory(prompt=prompt, key=f"sdxl/{n}.png", seed=n) for n in range(4)]


def read_export(study: Study) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(ground_truth_export(study=study, fmt="csv"))))


# --- export ---------------------------------------------------------------------------------------


def test_export_has_exactly_the_issue_columns_in_order(study, items):
    header = ground_truth_export(study=study, fmt="csv").splitlines()[0]
    assert header == (
        "item,question,image,t2i_model,category,word,prompt,seed,annotator_1,label_1,reason_1,"
        "annotator_2,label_2,reason_2,final_label,resolved_by,note,posterior"
    )


def test_export_lists_every_item_with_labels_reasons_final_label_and_who_resolved(
    study, items, annotator_a, annotator_b, researcher
):
    label_import(item=items[0], annotator=annotator_a, value="male")
    label_import(item=items[0], annotator=annotator_b, value="male")
    label_import(item=items[1], annotator=annotator_a, value="male")
    label_import(item=items[1], annotator=annotator_b, value="female")
    resolve(item=items[1], researcher=researcher, value="low_quality", note="blurry")
    label_import(item=items[2], annotator=annotator_b, value="other", reason="a cat")
    rows = read_export(study)
    assert [(r["item"], r["question"], r["image"]) for r in rows] == [
        (f"sdxl/{n}.png", "gender", f"sdxl/{n}.png") for n in range(4)
    ]
    agreed, resolved, partial, unlabelled = rows
    assert (agreed["annotator_1"], agreed["label_1"], agreed["annotator_2"], agreed["label_2"]) == (
        "anna",
        "male",
        "ben",
        "male",
    )
    assert (agreed["final_label"], agreed["resolved_by"]) == ("male", "")
    assert (resolved["final_label"], resolved["resolved_by"], resolved["note"]) == (
        "low_quality",
        "rita",
        "blurry",
    )
    assert (partial["annotator_1"], partial["label_1"], partial["reason_1"], partial["final_label"]) == (
        "ben",
        "other",
        "a cat",
        "",
    )
    assert (unlabelled["label_1"], unlabelled["final_label"], unlabelled["seed"]) == ("", "", "3")
    assert (unlabelled["t2i_model"], unlabelled["category"], unlabelled["word"], unlabelled["prompt"]) == (
        "sdxl",
        "profession",
        "nurse",
        "a photo of a nurse",
    )


def test_export_grows_columns_when_an_item_has_more_labels_than_n(study, items, annotator_a, annotator_b):
    study.labels_per_item = 3
    study.save()
    third = User.objects.create_user("cleo")
    for user in (annotator_a, annotator_b, third):
        label_import(item=items[0], annotator=user, value="female")
    header = ground_truth_export(study=study, fmt="csv").splitlines()[0].split(",")
    assert header[8:17] == [f"{kind}_{i}" for i in (1, 2, 3) for kind in ("annotator", "label", "reason")]


def test_json_export_holds_the_same_rows_with_typed_seed_and_the_questions(study, items):
    document = json.loads(ground_truth_export(study=study, fmt="json"))
    assert (document["study"], document["protocol"]) == ("gender", "gender")
    assert document["labels"] == ["male", "female", "low_quality", "other"]
    assert document["questions"] == [
        {
            "key": "gender",
            "text": question_of(items[0]).text,
            "values": ["male", "female", "low_quality", "other"],
        }
    ]
    assert document["columns"][-4:] == ["final_label", "resolved_by", "note", "posterior"]
    assert document["rows"] == ground_truth_rows(study=study)
    assert document["rows"][2]["seed"] == 2


def test_export_of_a_study_of_several_questions_has_one_row_per_item_and_question(db):
    study = StudyFactory(protocol="attributes")
    item = ItemFactory(prompt=PromptFactory(study=study), key="a.png")
    ItemFactory(prompt=PromptFactory(study=study), key="b.png", question_keys=["hat", "boots"])
    rows = read_export(study)
    assert [(r["item"], r["question"]) for r in rows][:2] == [("a.png", "boots"), ("a.png", "slippers")]
    assert len([r for r in rows if r["item"] == item.key]) == 15
    assert [r["question"] for r in rows if r["item"] == "b.png"] == ["boots", "hat"]


def test_export_of_a_pair_study_names_the_seed_photo_and_the_edit(db):
    study = StudyFactory(protocol="pair_change")
    pair = PairItemFactory(prompt=PromptFactory(study=study), key="pair_1")
    rows = read_export(study)
    seed_path = pair.item_images.get(role="input").source_path
    assert [r["question"] for r in rows] == ["age", "gender", "skin"]
    assert {(r["item"], r["image"], r["input_image"], r["output_image"]) for r in rows} == {
        ("pair_1", seed_path, seed_path, "pair_1.png")
    }
    header = ground_truth_export(study=study, fmt="csv").splitlines()[0]
    assert header.startswith("item,question,image,input_image,output_image,t2i_model,")


def test_export_of_an_unknown_format_is_refused(study):
    with pytest.raises(ValueError, match="unknown export format 'xml'"):
        ground_truth_export(study=study, fmt="xml")


def test_export_command_writes_the_file(study, items, tmp_path):
    target = tmp_path / "gt.json"
    err = io.StringIO()
    call_command("export_ground_truth", format="json", study="gender", output=str(target), stderr=err)
    assert len(json.loads(target.read_text())["rows"]) == 4
    assert "(4 items)" in err.getvalue()


def test_export_command_names_existing_studies_for_an_unknown_slug(study):
    with pytest.raises(CommandError, match="No study with slug 'nope' \\(existing studies: gender\\)"):
        call_command("export_ground_truth", study="nope", stdout=io.StringIO())


def test_export_command_says_so_when_the_output_cannot_be_written(study, tmp_path):
    with pytest.raises(CommandError, match="cannot write"):
        call_command("export_ground_truth", study="gender", output=str(tmp_path), stderr=io.StringIO())


# --- labels_import ----------------------------------------------------------------------------------


def test_labels_import_creates_missing_annotators_and_the_agreed_final_label(study, items, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label", "reason"],
        [["sdxl/0.png", "zoe", "female", ""], ["sdxl/0.png", "yann", "female", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert (summary.accepted, summary.rejected) == (2, [])
    zoe = User.objects.get(username="zoe")
    assert permissions.is_annotator(zoe)
    assert not zoe.has_usable_password()
    assert study.annotators.filter(username="zoe").exists()
    final = final_of(items[0])
    assert (final.value, final.source) == ("female", FinalLabelSource.AGREED)


def test_labels_import_finds_items_by_key_with_the_item_column(study, items, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["item", "question", "annotator", "label", "reason"],
        [["sdxl/1.png", "gender", "zoe", "other", "a statue"]],
    )
    assert labels_import(study=study, csv_path=path).accepted == 1
    assert Label.objects.get(item=items[1]).reason == "a statue"


def test_labels_import_reports_every_bad_row_and_writes_nothing(study, items, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label"],
        [
            ["sdxl/0.png", "zoe", "male"],
            ["sdxl/99.png", "zoe", "male"],
            ["sdxl/1.png", "zoe", "alien"],
            ["sdxl/0.png", "zoe", "female"],
            ["sdxl/2.png", "bad name!", "male"],
        ],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [str(r) for r in summary.rejected] == [
        "row 3 (sdxl/99.png): unknown image: sdxl/99.png is not an image of the study 'gender'",
        "row 4 (sdxl/1.png): unknown label 'alien' for gender (valid labels: male, female, low_quality, other)",
        "row 5 (sdxl/0.png): duplicate row: same item, question and annotator as row 2",
        "row 6 (sdxl/2.png): invalid annotator username 'bad name!'",
    ]
    assert summary.accepted == 0
    assert Label.objects.count() == 0
    assert not User.objects.filter(username="zoe").exists()


def test_labels_import_rolls_back_everything_when_the_service_refuses_a_row(study, items, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label", "reason"],
        [["sdxl/0.png", "zoe", "male", ""], ["sdxl/1.png", "zoe", "other", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert len(summary.rejected) == 1
    assert summary.rejected[0].row == 3
    assert summary.rejected[0].reason.startswith("zoe: The answer “Other” needs a short reason")
    assert Label.objects.count() == 0
    assert not User.objects.filter(username="zoe").exists()


def test_labels_import_refuses_a_third_annotator_on_an_item_of_two(study, items, tmp_path):
    path = write_csv(
        tmp_path / "labels.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "zoe", "male"], ["sdxl/0.png", "yann", "male"], ["sdxl/0.png", "xia", "male"]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [(r.row, r.reason) for r in summary.rejected] == [
        (4, "xia: Item sdxl/0.png already has its 2 annotators (zoe, yann).")
    ]
    assert Label.objects.count() == 0


def test_labels_import_refuses_labels_on_an_item_with_imported_ground_truth(study, items, tmp_path):
    final_set(item=items[0], value="male", decided_by=None)
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["sdxl/0.png", "zoe", "female"]])
    summary = labels_import(study=study, csv_path=path)
    assert summary.rejected
    assert Label.objects.count() == 0


def test_importing_the_same_labels_twice_changes_nothing(study, items, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["sdxl/0.png", "zoe", "male"]])
    labels_import(study=study, csv_path=path)
    revisions = LabelRevision.objects.count()
    again = labels_import(study=study, csv_path=path)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 1, [])
    assert LabelRevision.objects.count() == revisions


def test_a_labels_file_missing_a_column_is_refused_whole(study, items, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator"], [["sdxl/0.png", "zoe"]])
    with pytest.raises(ImportRejected, match="missing required column\\(s\\): label"):
        labels_import(study=study, csv_path=path)


def test_the_import_labels_command_prints_rejected_rows_and_fails(study, items, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["nope.png", "zoe", "male"]])
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 row\\(s\\) rejected: nothing was imported"):
        call_command("import_labels", str(path), study="gender", stdout=out)
    assert "row 2 (nope.png): unknown image" in out.getvalue()


def test_the_import_labels_command_turns_a_refused_file_into_a_message(study, items, tmp_path):
    path = write_csv(tmp_path / "l.csv", ["image", "annotator"], [["sdxl/0.png", "zoe"]])
    with pytest.raises(CommandError, match="missing required column"):
        call_command("import_labels", str(path), study="gender", stdout=io.StringIO())
    with pytest.raises(CommandError, match="cannot read the CSV file"):
        call_command("import_labels", str(tmp_path), study="gender", stdout=io.StringIO())


# --- corrections by import (issue 19) ----------------------------------------------------------


def test_a_label_change_by_import_reports_changed_and_the_agreed_final_it_reopened(study, items, tmp_path):
    agreed = write_csv(
        tmp_path / "a.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "zoe", "male"], ["sdxl/0.png", "yann", "male"], ["sdxl/1.png", "zoe", "female"]],
    )
    labels_import(study=study, csv_path=agreed)
    assert final_of(items[0]).source == FinalLabelSource.AGREED
    changed = write_csv(
        tmp_path / "b.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "yann", "female"], ["sdxl/1.png", "zoe", "female"], ["sdxl/2.png", "zoe", "male"]],
    )
    out = io.StringIO()
    call_command("import_labels", str(changed), study="gender", stdout=out)
    text = out.getvalue()
    assert "accepted: 1 labels" in text
    assert "changed: 1 labels" in text
    assert "finals reopened: 1" in text
    assert "sdxl/0.png: agreed final answer removed, back to disputed" in text
    assert "duplicates (already imported, unchanged): 1" in text
    assert not FinalLabel.objects.filter(item=items[0]).exists()


def test_a_dry_run_of_a_labels_import_reports_the_changes_and_writes_nothing(study, items, tmp_path):
    labels_import(
        study=study,
        csv_path=write_csv(
            tmp_path / "a.csv",
            ["image", "annotator", "label"],
            [["sdxl/0.png", "zoe", "male"], ["sdxl/0.png", "yann", "male"]],
        ),
    )
    labels_before = set(Label.objects.values_list("pk", "value"))
    revisions, users = LabelRevision.objects.count(), User.objects.count()
    changed = write_csv(
        tmp_path / "b.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "yann", "female"], ["sdxl/1.png", "newbie", "male"]],
    )
    out = io.StringIO()
    call_command("import_labels", str(changed), study="gender", dry_run=True, stdout=out)
    text = out.getvalue()
    assert "would be accepted: 1 labels" in text
    assert "would be changed: 1 labels" in text
    assert "would be finals reopened: 1" in text
    assert "nothing was written" in text
    assert set(Label.objects.values_list("pk", "value")) == labels_before
    assert (LabelRevision.objects.count(), User.objects.count()) == (revisions, users)
    assert final_of(items[0]).value == "male"


def test_labels_naming_a_researcher_or_admin_are_refused_unless_add_annotators(
    study, items, tmp_path, researcher, admin_user
):
    path = write_csv(
        tmp_path / "l.csv",
        ["image", "annotator", "label"],
        [["sdxl/0.png", "anna", "male"], ["sdxl/0.png", "rita", "male"], ["sdxl/1.png", "adam", "female"]],
    )
    out = io.StringIO()
    with pytest.raises(CommandError, match="2 row\\(s\\) rejected: nothing was imported"):
        call_command("import_labels", str(path), study="gender", stdout=out)
    text = out.getvalue()
    assert (
        "row 3 (sdxl/0.png): annotator 'rita' is a researcher, not an annotator of the study 'gender'" in text
    )
    assert "row 4 (sdxl/1.png): annotator 'adam' is an admin" in text
    assert "--add-annotators" in text
    assert not Label.objects.exists()
    assert not study.annotators.filter(pk__in=[researcher.pk, admin_user.pk]).exists()
    call_command("import_labels", str(path), study="gender", add_annotators=True, stdout=io.StringIO())
    assert Label.objects.count() == 3
    assert study.annotators.filter(pk__in=[researcher.pk, admin_user.pk]).count() == 2


def test_a_dry_run_of_a_ground_truth_import_writes_nothing(study, items, tmp_path):
    path = write_csv(
        tmp_path / "t.csv", ["image", "label"], [["sdxl/0.png", "male"], ["sdxl/1.png", "female"]]
    )
    out = io.StringIO()
    call_command("import_ground_truth", str(path), study="gender", dry_run=True, stdout=out)
    assert "would be accepted: 2 final labels" in out.getvalue()
    assert not FinalLabel.objects.exists()


@pytest.fixture
def attributes(db):
    study = StudyFactory(slug="attrs", protocol="attributes")
    prompt = PromptFactory(study=study)
    return study, [ItemFactory(prompt=prompt, key=f"a{n}.png") for n in range(2)]


def test_labels_of_a_study_of_several_questions_need_the_question_column(attributes, tmp_path):
    study, _ = attributes
    path = write_csv(tmp_path / "l.csv", ["image", "annotator", "label"], [["a0.png", "zoe", "yes"]])
    summary = labels_import(study=study, csv_path=path)
    assert [str(r) for r in summary.rejected] == [
        "row 2 (a0.png): the study asks 15 questions: give the 'question' column"
    ]


def test_labels_import_puts_each_answer_on_its_question(attributes, tmp_path):
    study, items = attributes
    path = write_csv(
        tmp_path / "l.csv",
        ["item", "question", "annotator", "label"],
        [
            ["a0.png", "hat", "zoe", "yes"],
            ["a0.png", "boots", "zoe", "no"],
            ["a0.png", "wings", "zoe", "no"],
            ["a1.png", "hat", "zoe", "maybe"],
        ],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [str(r) for r in summary.rejected] == [
        "row 4 (a0.png): unknown question 'wings' (questions: boots, slippers, jeans, shorts, slacks, dress, "
        "skirt, suit, shirt, uniform, jacket, hat, tie, mask, gloves)",
        "row 5 (a1.png): unknown label 'maybe' for hat (valid labels: yes, no)",
    ]
    fixed = write_csv(
        tmp_path / "l2.csv",
        ["item", "question", "annotator", "label"],
        [["a0.png", "hat", "zoe", "yes"], ["a0.png", "boots", "zoe", "no"]],
    )
    assert labels_import(study=study, csv_path=fixed).accepted == 2
    assert dict(Label.objects.filter(item=items[0]).values_list("question__key", "value")) == {
        "hat": "yes",
        "boots": "no",
    }


def test_a_question_the_item_does_not_ask_is_refused(db, tmp_path):
    study = StudyFactory(protocol="attributes")
    ItemFactory(prompt=PromptFactory(study=study), key="a.png", question_keys=["hat"])
    path = write_csv(
        tmp_path / "l.csv", ["item", "question", "annotator", "label"], [["a.png", "boots", "z", "no"]]
    )
    summary = labels_import(study=study, csv_path=path)
    assert summary.rejected[0].reason == "the item a.png does not ask the question 'boots'"


# --- bad values in a labels file (issue 9, item 7) --------------------------------------------------


@pytest.mark.parametrize(
    ("cells", "reason"),
    [
        (["sdxl/1.png", "zoe", "other", "a ro\x00bot"], "the reason contains a NUL character"),
        (["sdxl/1.png", "zoe", "ma\x00le", ""], "unknown label 'ma\\x00le' for gender"),
        (["sdxl/1.png", "zo\x00e", "male", ""], "invalid annotator username 'zo\\x00e'"),
        (["sdxl/\x001.png", "zoe", "male", ""], "unknown image: sdxl/\x001.png is not an image"),
        (["sdxl/1.png", "zoe", "m" * 1001, ""], "the label is longer than 1000 characters"),
        (["sdxl/1.png", "zoe", "other", "r" * 2001], "the reason is longer than 2000 characters"),
        (["sdxl/1.png", "z" * 151, "male", ""], "invalid annotator username"),
    ],
    ids=["nul-reason", "nul-label", "nul-user", "nul-image", "long-label", "long-reason", "long-user"],
)
def test_one_bad_value_in_a_labels_file_is_reported_by_row_and_nothing_is_written(
    study, items, tmp_path, cells, reason
):
    path = write_csv(
        tmp_path / "l.csv",
        ["image", "annotator", "label", "reason"],
        [["sdxl/0.png", "yann", "male", ""], cells, ["sdxl/2.png", "yann", "female", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [r.row for r in summary.rejected] == [3]
    assert summary.rejected[0].reason.startswith(reason)
    assert (Label.objects.count(), User.objects.filter(username="yann").exists()) == (0, False)


def test_nan_in_a_reason_is_just_text(study, items, tmp_path):
    path = write_csv(
        tmp_path / "l.csv", ["image", "annotator", "label", "reason"], [["sdxl/0.png", "zoe", "other", "NaN"]]
    )
    assert labels_import(study=study, csv_path=path).accepted == 1
    assert Label.objects.get().reason == "NaN"
    assert json.loads(ground_truth_export(study=study, fmt="json"))["rows"][0]["reason_1"] == "NaN"


def test_a_labels_file_that_is_not_utf8_is_refused_whole(study, items, tmp_path):
    path = tmp_path / "l.csv"
    path.write_bytes(b"image,annotator,label\nsdxl/0.png,zoe,male\nsdxl/1.png,z\xffe,male\n")
    with pytest.raises(ImportRejected, match="not UTF-8"):
        labels_import(study=study, csv_path=path)
    assert Label.objects.count() == 0


# --- ground_truth_import -----------------------------------------------------------------------------


def test_ground_truth_import_sets_imported_final_labels_with_note_and_who(study, items, researcher, tmp_path):
    path = write_csv(
        tmp_path / "gt.csv",
        ["image", "label", "note"],
        [["sdxl/0.png", "female", "from the paper"], ["sdxl/1.png", "low_quality", ""]],
    )
    summary = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert (summary.accepted, summary.rejected) == (2, [])
    final = final_of(items[0])
    assert (final.value, final.source, final.note, final.decided_by) == (
        "female",
        FinalLabelSource.IMPORTED,
        "from the paper",
        researcher,
    )


def test_ground_truth_import_records_the_decider_named_in_resolved_by(study, items, researcher, tmp_path):
    path = write_csv(
        tmp_path / "gt.csv",
        ["item", "label", "resolved_by", "note"],
        [
            ["sdxl/0.png", "female", "rita", "n"],
            ["sdxl/1.png", "male", "", ""],
            ["sdxl/2.png", "male", "nora", ""],
        ],
    )
    admin = User.objects.create_user("adele")
    assert ground_truth_import(study=study, csv_path=path, user=admin).rejected == []
    assert [final_of(item).decided_by.username for item in items[:3]] == ["rita", "adele", "nora"]
    nora = User.objects.get(username="nora")
    assert not nora.has_usable_password()
    assert not nora.groups.exists()


def test_ground_truth_import_reports_every_bad_row_and_writes_nothing(study, items, researcher, tmp_path):
    path = write_csv(
        tmp_path / "gt.csv",
        ["image", "label", "note", "resolved_by"],
        [
            ["sdxl/0.png", "male", "", ""],
            ["ghost.png", "male", "", ""],
            ["sdxl/1.png", "", "", ""],
            ["sdxl/2.png", "MALE", "", ""],
            ["sdxl/0.png", "male", "", ""],
            ["sdxl/3.png", "male", "no\x00te", ""],
            ["sdxl/3.png", "male", "", "not a name"],
        ],
    )
    summary = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert [(r.row, r.reason.split(":")[0].split(" (")[0]) for r in summary.rejected] == [
        (3, "unknown image"),
        (4, "empty label"),
        (5, "unknown label 'MALE' for gender"),
        (6, "duplicate row"),
        (7, "the note contains a NUL character"),
        (8, "invalid resolved_by username 'not a name'"),
    ]
    assert FinalLabel.objects.count() == 0


def test_ground_truth_of_a_study_of_several_questions_goes_to_each_question(attributes, tmp_path):
    study, items = attributes
    path = write_csv(
        tmp_path / "gt.csv",
        ["item", "question", "label"],
        [["a0.png", "hat", "yes"], ["a0.png", "tie", "no"], ["a1.png", "hat", "no"]],
    )
    assert ground_truth_import(study=study, csv_path=path, user=None).accepted == 3
    assert dict(FinalLabel.objects.filter(item=items[0]).values_list("question__key", "value")) == {
        "hat": "yes",
        "tie": "no",
    }


def test_importing_the_same_ground_truth_twice_changes_nothing(study, items, researcher, tmp_path):
    path = write_csv(tmp_path / "gt.csv", ["image", "label", "note"], [["sdxl/0.png", "male", "n"]])
    ground_truth_import(study=study, csv_path=path, user=researcher)
    again = ground_truth_import(study=study, csv_path=path, user=researcher)
    assert (again.accepted, again.duplicates) == (0, 1)
    assert items[0].final_label_revisions.count() == 1


def test_the_import_ground_truth_command_refuses_an_unknown_user(study, items, tmp_path):
    path = write_csv(tmp_path / "gt.csv", ["image", "label"], [["sdxl/0.png", "male"]])
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("import_ground_truth", str(path), study="gender", user="ghost")


def test_the_import_ground_truth_command_prints_bad_rows_and_fails(study, items, tmp_path):
    path = write_csv(tmp_path / "gt.csv", ["image", "label"], [["sdxl/0.png", "alien"]])
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 row\\(s\\) rejected: nothing was imported"):
        call_command("import_ground_truth", str(path), study="gender", stdout=out)
    assert "row 2 (sdxl/0.png): unknown label 'alien'" in out.getvalue()


# --- round trips (issue 9, item 4) ---------------------------------------------------------------


def _pairs(rows: list[dict[str, str]]) -> tuple[list[str], list[str]]:
    both = [r for r in rows if r["label_1"] and r["label_2"]]
    return [r["label_1"] for r in both], [r["label_2"] for r in both]


def _agreement_pairs(study: Study) -> tuple[list[str], list[str]]:
    by_item: dict[int, list[str]] = {}
    for item_id, _model, _cat, _user, value in label_rows_for_agreement(study=study):
        by_item.setdefault(item_id, []).append(value)
    pairs = [v for v in by_item.values() if len(v) == 2]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _reimport(
    *, tmp_path: Path, settings, study: Study, manifest: Path, root: Path, **definition: object
) -> tuple[Study, str, str]:
    """Export ``study``, empty the database, rebuild it from the manifest and the export file;
    returns the new study and both exports (CSV, JSON) of the original."""
    before_csv, before_json = export_text(study), export_text(study, "json")
    export_file = tmp_path / "export.csv"
    export_file.write_text(before_csv, encoding="utf-8")
    slug, protocol = study.slug, study.protocol
    empty_database(settings, tmp_path)
    fresh = study_define(slug=slug, protocol=protocol, **definition).study
    imported = images_import(study=fresh, manifest_path=manifest, root=root)
    assert imported.rejected == []
    labels = labels_import(study=fresh, csv_path=export_file)
    assert labels.rejected == []
    truth = ground_truth_import(study=fresh, csv_path=export_file, user=None)
    assert truth.rejected == []
    return fresh, before_csv, before_json


def test_a_gender_study_exported_and_imported_into_an_empty_database_exports_identically(
    tmp_path, settings, django_user_model
):
    manifest, root = one_image_manifest(tmp_path, 12)
    study = study_define(slug="rt", protocol="gender", name="Round trip").study
    images_import(study=study, manifest_path=manifest, root=root)
    # Created in an order unlike their label order, so pairing must not depend on it.
    zed, amy, bob = (django_user_model.objects.create_user(u) for u in ("zed", "amy", "bob"))
    boss = django_user_model.objects.create_user("boss")
    plan = ["male", "female", "male", "other", "low_quality", "female", "male", "male", "female", "other"]
    second = ["male", "male", "male", "other", "female", "female", "low_quality", "male", "female", "male"]
    items = list(Item.objects.filter(study=study).order_by("id"))
    for i, item in enumerate(items[:10]):
        first_user, second_user = (zed, amy) if i % 2 else (bob, zed)
        label_import(
            item=item, annotator=first_user, value=plan[i], reason=f"a statue {i}" * (plan[i] == "other")
        )
        label_import(
            item=item, annotator=second_user, value=second[i], reason="a robot" * (second[i] == "other")
        )
    resolve(item=items[1], researcher=boss, value="female", note="looked again")
    services.dispute_resolve_unresolvable(item=items[4], question=question_of(items[4]), researcher=boss)
    label_import(item=items[10], annotator=amy, value="male")
    final_set(item=items[11], value="low_quality", decided_by=boss, note="released")

    exported = read_export(study)
    kappa_before = cohen_kappa_score(*_pairs(exported))
    agreement_kappa_before = cohen_kappa_score(*_agreement_pairs(study))
    fresh, before_csv, before_json = _reimport(
        tmp_path=tmp_path, settings=settings, study=study, manifest=manifest, root=root, name="Round trip"
    )

    assert export_text(fresh) == before_csv
    assert export_text(fresh, "json") == before_json
    assert cohen_kappa_score(*_pairs(read_export(fresh))) == pytest.approx(kappa_before)
    assert cohen_kappa_score(*_agreement_pairs(fresh)) == pytest.approx(agreement_kappa_before)
    other = Label.objects.get(item__key="3.png", annotator__username="zed")
    assert (other.value, other.reason) == ("other", "a statue 3")


def test_an_attributes_study_of_15_questions_round_trips_identically(tmp_path, settings, django_user_model):
    manifest, root = one_image_manifest(tmp_path, 4, extra={"setting": ["office", "street", "", "beach"]})
    study = study_define(slug="clothes", protocol="attributes").study
    images_import(study=study, manifest_path=manifest, root=root)
    assert Item.objects.get(study=study, key="0.png").metadata == {"setting": "office"}
    cleo, anna, ben = (django_user_model.objects.create_user(u) for u in ("cleo", "anna", "ben"))
    questions = list(Question.objects.filter(study=study).order_by("position"))
    assert len(questions) == 15
    items = list(Item.objects.filter(study=study).order_by("id"))
    for i, item in enumerate(items[:3]):
        for q, question in enumerate(questions):
            for a, annotator in enumerate((anna, ben, cleo)):
                value = "yes" if (i + q + a * (q % 3 == 0)) % 2 else "no"
                services.label_import(item=item, question=question, annotator=annotator, value=value)
    hat = next(q for q in questions if q.key == "hat")
    services.label_import(item=items[3], question=hat, annotator=ben, value="yes")
    services.final_label_set(
        item=items[3], question=questions[0], value="no", decided_by=None, note="released"
    )
    rows = export_rows(study)
    assert len(rows) == 4 * 15
    assert sum(1 for r in rows if r["note"].startswith("2 of 3 annotators")) > 0

    fresh, before_csv, before_json = _reimport(
        tmp_path=tmp_path, settings=settings, study=study, manifest=manifest, root=root
    )
    assert export_text(fresh) == before_csv
    assert export_text(fresh, "json") == before_json


def test_a_pair_change_study_round_trips_identically(tmp_path, settings, django_user_model):
    manifest, root = pair_manifest(tmp_path, 4)
    study = study_define(slug="edits", protocol="pair_change").study
    assert images_import(study=study, manifest_path=manifest, root=root).rejected == []
    anna, ben, rita = (django_user_model.objects.create_user(u) for u in ("anna", "ben", "rita"))
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    items = list(Item.objects.filter(study=study).order_by("id"))
    answers = {
        "age": [("older", "older"), ("same", "younger"), ("younger", "younger")],
        "gender": [
            ("male_male", "male_male"),
            ("female_male", "female_female"),
            ("male_female", "male_female"),
        ],
        "skin": [("lighter", "lighter"), ("darker", "same"), ("same", "same")],
    }
    for key, pairs in answers.items():
        for item, (a, b) in zip(items, pairs, strict=False):
            services.label_import(item=item, question=questions[key], annotator=anna, value=a)
            services.label_import(item=item, question=questions[key], annotator=ben, value=b)
    services.dispute_resolve(
        item=items[1],
        question=questions["age"],
        researcher=rita,
        value="younger",
        note="looks 20 years younger",
    )
    rows = export_rows(study)
    assert {(r["item"], r["input_image"]) for r in rows if r["question"] == "age"} == {
        ("pair_00", "seeds/person_0.png"),
        ("pair_01", "seeds/person_1.png"),
        ("pair_02", "seeds/person_0.png"),
        ("pair_03", "seeds/person_1.png"),
    }

    fresh, before_csv, before_json = _reimport(
        tmp_path=tmp_path, settings=settings, study=study, manifest=manifest, root=root
    )
    assert export_text(fresh) == before_csv
    assert export_text(fresh, "json") == before_json
    assert Item.objects.get(study=fresh, key="pair_00").metadata == {"domain": "profession"}


def test_an_export_without_reason_columns_still_imports(study, items, annotator_a, annotator_b, tmp_path):
    # Files exported before issue 9 have no reason_i columns: "other" gets a placeholder.
    path = write_csv(
        tmp_path / "old.csv",
        ["image", "annotator_1", "label_1", "annotator_2", "label_2", "final_label"],
        [["sdxl/0.png", "zoe", "other", "yann", "male", ""]],
    )
    assert labels_import(study=study, csv_path=path).rejected == []
    assert Label.objects.get(annotator__username="zoe").reason == REASON_NOT_EXPORTED


def test_reimporting_an_export_into_the_same_study_changes_nothing(
    study, items, annotator_a, annotator_b, tmp_path
):
    label_import(item=items[0], annotator=annotator_a, value="other", reason="a painting")
    label_import(item=items[0], annotator=annotator_b, value="male")
    export_file = tmp_path / "export.csv"
    export_file.write_text(ground_truth_export(study=study, fmt="csv"), encoding="utf-8")
    revisions = LabelRevision.objects.count()
    summary = labels_import(study=study, csv_path=export_file)
    assert (summary.accepted, summary.duplicates, summary.rejected) == (0, 2, [])
    assert Label.objects.get(annotator=annotator_a).reason == "a painting"
    assert LabelRevision.objects.count() == revisions
    truth = ground_truth_import(study=study, csv_path=export_file, user=None)
    assert (truth.accepted, truth.rejected) == (0, [])


def test_a_wide_label_without_its_annotator_is_refused_and_an_empty_choice_is_unknown(study, items, tmp_path):
    path = write_csv(
        tmp_path / "wide.csv",
        ["item", "question", "annotator_1", "label_1", "reason_1", "annotator_2", "label_2", "reason_2"],
        [["sdxl/0.png", "gender", "", "male", "", "zoe", "", ""]],
    )
    summary = labels_import(study=study, csv_path=path)
    assert [r.reason for r in summary.rejected] == [
        "label_1 is set but annotator_1 is empty",
        "unknown label '' for gender (valid labels: male, female, low_quality, other)",
    ]
    assert Label.objects.count() == 0
