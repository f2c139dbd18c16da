"""Bad input into an attributes (GEP) study is refused row by row, before it can reach the
report: labels for a question the item does not ask, a value other than yes/no, a fourth
label on a three-label item (the label import), and metadata ``gender`` other than woman/man
or an explicit item without its ``attribute`` (the image import, through the protocol's
``validate_metadata`` hook)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from annotate.imports import labels_import
from annotate.models import FinalLabel, Label
from protocols.attributes.spec import gep_metadata_problem
from studies.ingest import images_import
from studies.models import Item
from studies.protocols import PROTOCOLS, protocol_spec
from tests.factories import ItemFactory, PromptFactory, StudyFactory, png_bytes

pytestmark = pytest.mark.django_db


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def gep_study():
    """The attributes preset (15 questions, 3 labels per item, majority) with one neutral and
    one explicit (boots) item."""
    study = StudyFactory(slug="gep", protocol="attributes")
    prompt = PromptFactory(study=study)
    ItemFactory(prompt=prompt, key="neutral.png", metadata={"gender": "woman", "setting": "neutral"})
    ItemFactory(
        prompt=prompt,
        key="explicit.png",
        metadata={"gender": "man", "setting": "explicit", "attribute": "boots"},
        question_keys=["boots"],
    )
    return study


LABEL_HEADER = ["item", "question", "annotator", "label"]


# --- labels -----------------------------------------------------------------------------------------


def test_a_label_for_a_question_the_explicit_item_does_not_ask_is_a_row_error(gep_study, tmp_path):
    path = write_csv(
        tmp_path / "l.csv",
        LABEL_HEADER,
        [["explicit.png", "boots", "anna", "yes"], ["explicit.png", "hat", "anna", "no"]],
    )
    summary = labels_import(study=gep_study, csv_path=path)
    assert [(r.row, r.reason) for r in summary.rejected] == [
        (3, "the item explicit.png does not ask the question 'hat'")
    ]
    assert not Label.objects.exists()  # the bad row, and with it the file, is not written


def test_a_value_other_than_yes_or_no_is_a_row_error(gep_study, tmp_path):
    path = write_csv(
        tmp_path / "l.csv",
        LABEL_HEADER,
        [["neutral.png", "hat", "anna", "yes"], ["neutral.png", "boots", "anna", "maybe"]],
    )
    summary = labels_import(study=gep_study, csv_path=path)
    assert [(r.row, r.reason) for r in summary.rejected] == [
        (3, "unknown label 'maybe' for boots (valid labels: yes, no)")
    ]
    assert not Label.objects.exists()


def test_a_fourth_label_on_a_three_label_item_is_a_row_error_and_nothing_is_written(gep_study, tmp_path):
    rows = [["explicit.png", "boots", name, "yes"] for name in ("anna", "ben", "cleo", "dan")]
    summary = labels_import(study=gep_study, csv_path=write_csv(tmp_path / "l.csv", LABEL_HEADER, rows))
    assert [r.row for r in summary.rejected] == [5]
    assert summary.rejected[0].reason.startswith("dan: Item explicit.png already has its 3 annotators")
    assert (Label.objects.count(), FinalLabel.objects.count()) == (0, 0)
    # The three good rows alone go in, and their majority is the final answer.
    summary = labels_import(study=gep_study, csv_path=write_csv(tmp_path / "ok.csv", LABEL_HEADER, rows[:3]))
    assert (summary.accepted, summary.rejected) == (3, [])
    assert FinalLabel.objects.get(item__key="explicit.png").value == "yes"


def test_a_two_to_one_majority_is_final_for_three_labels(gep_study, tmp_path):
    rows = [
        ["explicit.png", "boots", name, value]
        for name, value in (("anna", "yes"), ("ben", "no"), ("cleo", "yes"))
    ]
    labels_import(study=gep_study, csv_path=write_csv(tmp_path / "l.csv", LABEL_HEADER, rows))
    final = FinalLabel.objects.get(item__key="explicit.png")
    assert (final.value, final.note) == ("yes", "2 of 3 annotators chose “yes”.")


# --- metadata ---------------------------------------------------------------------------------------


def test_the_attributes_protocol_checks_gep_metadata_and_the_others_accept_any():
    assert protocol_spec("attributes").validate_metadata is gep_metadata_problem
    assert gep_metadata_problem({"gender": "woman", "setting": "neutral"}) is None
    assert gep_metadata_problem({"gender": "man", "setting": "explicit", "attribute": "tie"}) is None
    assert gep_metadata_problem({}) is None  # not a GEP comparison item: the report leaves it out
    assert gep_metadata_problem({"gender": "female"}) == "metadata gender 'female' is not one of woman, man"
    assert gep_metadata_problem({"gender": "woman", "setting": "explicit"}) == (
        "an explicit item needs the attribute its prompt names (metadata column 'attribute')"
    )
    for key, spec in PROTOCOLS.items():
        if key != "attributes":
            assert spec.validate_metadata({"gender": "female", "setting": "explicit"}) is None, key


def test_the_objects_protocol_needs_each_items_gender_male_or_female():
    check = protocol_spec("objects").validate_metadata
    assert check({"gender": "male", "gender_word": "boy"}) is None
    assert check({"gender": "female"}) is None
    assert check({"template": "A {gender} holding an item"}) == (
        "metadata gender is missing: an objects item needs its prompt's gender (male or female)"
    )
    assert check({"gender": "woman"}) == "metadata gender 'woman' is not one of male, female"


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for n in range(4):
        (folder / f"{n}.png").write_bytes(png_bytes(50 + n))
    return folder


HEADER = ["image", "t2i_model", "prompt", "category", "word", "gender", "setting", "context", "attribute"]


def test_bad_gep_metadata_is_a_row_error_at_import_and_the_good_rows_go_in(gep_study, images, tmp_path):
    manifest = write_csv(
        tmp_path / "m.csv",
        HEADER,
        [
            [
                "0.png",
                "sdxl",
                "A woman riding a bike.",
                "neutral",
                "riding a bike",
                "woman",
                "neutral",
                "riding a bike",
                "",
            ],
            [
                "1.png",
                "sdxl",
                "A person riding a bike.",
                "neutral",
                "riding a bike",
                "person",
                "neutral",
                "riding a bike",
                "",
            ],
            [
                "2.png",
                "sdxl",
                "A man in a tie riding a bike.",
                "explicit",
                "riding a bike",
                "man",
                "explicit",
                "riding a bike",
                "",
            ],
            [
                "3.png",
                "sdxl",
                "A man in a tie riding a bike.",
                "explicit",
                "riding a bike",
                "man",
                "explicit",
                "riding a bike",
                "tie",
            ],
        ],
    )
    summary = images_import(study=gep_study, manifest_path=manifest, root=images)
    assert [(r.row, r.path, r.reason) for r in summary.rejected] == [
        (3, "1.png", "metadata gender 'person' is not one of woman, man"),
        (4, "2.png", "an explicit item needs the attribute its prompt names (metadata column 'attribute')"),
    ]
    assert summary.accepted == 2
    imported = dict(
        Item.objects.filter(study=gep_study, key__in=["0.png", "3.png"]).values_list("key", "question_keys")
    )
    assert imported == {"0.png": [], "3.png": ["tie"]}
    assert not Item.objects.filter(key__in=["1.png", "2.png"]).exists()


def test_a_gender_study_keeps_such_metadata_as_it_is(study, images, tmp_path):
    manifest = write_csv(
        tmp_path / "m.csv",
        HEADER,
        [["0.png", "sdxl", "a person", "job", "lawyer", "person", "explicit", "", ""]],
    )
    summary = images_import(study=study, manifest_path=manifest, root=images)
    assert (summary.accepted, summary.rejected) == (1, [])
    assert Item.objects.get(key="0.png").metadata == {"gender": "person", "setting": "explicit"}
