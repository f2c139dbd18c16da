"""studies.services: defining a study (study_create, study_define) and reading a questions CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from studies.errors import ImportRejected, StudyConflict
from studies.models import Question, Study
from studies.protocols import PROTOCOLS, protocol_spec
from studies.services import questions_csv_read, study_create, study_define
from tests.annotate.gender import final_set, label_import
from tests.factories import ItemFactory, PairItemFactory, PromptFactory, UserFactory

QUESTIONS_HEADER = "key,text,choices,kind,hotkey,default,unresolvable,requires_reason,clear\n"


def questions_file(tmp_path: Path, *rows: str, header: str = QUESTIONS_HEADER) -> Path:
    path = tmp_path / "questions.csv"
    path.write_text(header + "".join(f"{row}\n" for row in rows), encoding="utf-8")
    return path


def question_rows(study: Study) -> list[tuple]:
    return list(
        Question.objects.filter(study=study)
        .order_by("position")
        .values_list(
            "key", "text", "choices", "kind", "hotkey", "default_value", "unresolvable_value", "position"
        )
    )


# --- study_create ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_a_new_study_gets_its_protocols_preset(db, protocol):
    spec = protocol_spec(protocol)
    study = study_create(slug=f"s-{protocol}", protocol=protocol)
    assert (study.protocol, study.labels_per_item, study.agreement) == (
        protocol,
        spec.labels_per_item,
        spec.agreement,
    )
    assert [q.key for q in study.questions.order_by("position")] == [q.key for q in spec.questions]
    assert study.parameters == dict(spec.parameters)


def test_the_gender_preset_is_the_papers_label_set(db):
    question = study_create(slug="g", protocol="gender").questions.get()
    assert question.values == ["male", "female", "low_quality", "other"]
    assert question.clear_values == ["male", "female"]
    assert question.unresolvable_value == "low_quality"
    assert question.choice("other")["requires_reason"] is True


def test_a_name_taken_by_another_study_gets_a_number(db):
    study_create(slug="a", protocol="gender", name="Pilot")
    assert study_create(slug="b", protocol="gender", name="Pilot").name == "Pilot (2)"
    assert study_create(slug="c", protocol="gender").name == "C"


# --- study_define ------------------------------------------------------------------------------


def test_defining_a_study_twice_with_the_same_arguments_changes_nothing(db):
    first = study_define(slug="attrs", protocol="attributes", name="Clothes", labels_per_item=5)
    before = (
        list(Study.objects.values()),
        question_rows(first.study),
        list(Question.objects.values_list("id")),
    )
    again = study_define(slug="attrs", protocol="attributes", name="Clothes", labels_per_item=5)
    assert (first.created, again.created, again.changed) == (True, False, [])
    assert (
        list(Study.objects.values()),
        question_rows(again.study),
        list(Question.objects.values_list("id")),
    ) == before


def test_options_left_out_keep_the_studys_own_values(db):
    study_define(slug="g", protocol="gender", labels_per_item=3, agreement="majority")
    result = study_define(slug="g", protocol="gender")
    assert result.changed == []
    assert (result.study.labels_per_item, result.study.agreement) == (3, "majority")


def test_a_renamed_study_keeps_its_numbered_name_when_defined_again(db):
    study_create(slug="other", protocol="gender", name="Pilot")
    study_define(slug="p", protocol="gender", name="Pilot")
    assert study_define(slug="p", protocol="gender", name="Pilot").changed == []
    assert Study.objects.get(slug="p").name == "Pilot (2)"


def test_a_study_without_labels_is_brought_to_the_new_definition(db, tmp_path):
    study_define(slug="s", protocol="gender")
    path = questions_file(
        tmp_path,
        "gender,Gender?,man:Man:m|woman:Woman:w,,,,,,man|woman",
        "mood,Which mood?,happy:Happy:h|sad:Sad:s,,,,,,",
    )
    result = study_define(slug="s", protocol="gender", labels_per_item=3, questions=questions_csv_read(path))
    assert result.changed == ["labels_per_item", "questions"]
    assert [q.key for q in result.study.questions.all()] == ["gender", "mood"]
    assert result.study.labels_per_item == 3


def test_changing_the_protocol_of_an_unlabelled_study_takes_the_new_preset(db):
    study_define(slug="s", protocol="gender")
    result = study_define(slug="s", protocol="attributes")
    assert result.changed == ["protocol", "labels_per_item", "agreement", "questions"]
    study = Study.objects.get(slug="s")
    assert (study.labels_per_item, study.agreement, study.questions.count()) == (3, "majority", 15)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"protocol": "attributes"}, "protocol, labels_per_item, agreement, questions"),
        ({"labels_per_item": 3}, "labels_per_item"),
        ({"labels_per_item": 3, "agreement": "majority"}, "labels_per_item, agreement"),
    ],
)
def test_a_different_definition_of_a_labelled_study_is_a_clear_error(db, changes, named):
    study = study_define(slug="g", protocol="gender").study
    label_import(item=ItemFactory(prompt=PromptFactory(study=study)), annotator=UserFactory(), value="male")
    before = (list(Study.objects.values()), question_rows(study))
    arguments = {"slug": "g", "protocol": "gender", **changes}
    with pytest.raises(StudyConflict, match=f"already has labels: its {named} cannot change"):
        study_define(**arguments)
    assert (list(Study.objects.values()), question_rows(study)) == before


def test_new_questions_on_a_labelled_study_are_refused(db, tmp_path):
    study = study_define(slug="g", protocol="gender").study
    label_import(item=ItemFactory(prompt=PromptFactory(study=study)), annotator=UserFactory(), value="male")
    path = questions_file(tmp_path, "gender,Gender?,male:Male:m|female:Female:f,,,,,,male|female")
    with pytest.raises(StudyConflict, match="its questions cannot change"):
        study_define(slug="g", protocol="gender", questions=questions_csv_read(path))


def test_new_questions_on_a_study_with_imported_final_labels_are_refused(db, tmp_path):
    study = study_define(slug="g", protocol="gender").study
    final_set(item=ItemFactory(prompt=PromptFactory(study=study)), value="male", decided_by=None)
    path = questions_file(tmp_path, "gender,Gender?,male:Male:m|female:Female:f,,,,,,male|female")
    with pytest.raises(StudyConflict, match="already has final labels"):
        study_define(slug="g", protocol="gender", questions=questions_csv_read(path))
    assert Question.objects.get(study=study).values == ["male", "female", "low_quality", "other"]


def test_the_name_of_a_labelled_study_may_change(db):
    study = study_define(slug="g", protocol="gender").study
    label_import(item=ItemFactory(prompt=PromptFactory(study=study)), annotator=UserFactory(), value="male")
    assert study_define(slug="g", protocol="gender", name="Renamed").changed == ["name"]


def test_a_study_of_one_image_items_cannot_become_a_pair_study(db):
    study = study_define(slug="g", protocol="gender").study
    ItemFactory(prompt=PromptFactory(study=study))
    with pytest.raises(
        StudyConflict, match="has items with 'image' images, which a pair_change study does not use"
    ):
        study_define(slug="g", protocol="pair_change")


def test_a_pair_study_of_pairs_may_change_its_questions_before_labels(db):
    study = study_define(slug="p", protocol="pair_change").study
    PairItemFactory(prompt=PromptFactory(study=study))
    assert study_define(slug="p", protocol="pair_change", labels_per_item=3).changed == ["labels_per_item"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"protocol": "faces"}, "Unknown protocol “faces”"),
        ({"protocol": "gender", "agreement": "vote"}, "Unknown agreement rule “vote”"),
        ({"protocol": "gender", "labels_per_item": 0}, "between 1 and 32767"),
        ({"protocol": "gender", "labels_per_item": 40_000}, "between 1 and 32767"),
        ({"protocol": "gender", "agreement": "majority"}, "A majority needs at least 3 labels per item"),
        ({"protocol": "gender", "name": "n" * 201}, "at most 200 characters"),
    ],
)
def test_an_impossible_definition_is_refused(db, arguments, message):
    with pytest.raises(StudyConflict, match=message):
        study_define(slug="x", **arguments)
    assert not Study.objects.exists()


def test_a_majority_check_uses_the_studys_own_labels_per_item(db):
    study_define(slug="g", protocol="gender", labels_per_item=3)
    assert study_define(slug="g", protocol="gender", agreement="majority").changed == ["agreement"]
    with pytest.raises(StudyConflict, match="A majority needs at least 3"):
        study_define(slug="g", protocol="gender", labels_per_item=2)


# --- questions_csv_read -------------------------------------------------------------------------


def test_a_questions_csv_gives_choices_with_keys_flags_and_defaults(tmp_path):
    path = questions_file(
        tmp_path,
        "gender,Which gender?,male:Male:M|female:Female:f|unsure:Cannot tell:u|other:Other:o,,,,unsure,other,male|female",
        "glasses,Wears glasses?,yes:Yes:|no:No:,toggle,g,no,,,",
        "objects,Which objects?,,classes,,,,,",
    )
    gender, glasses, objects = questions_csv_read(path)
    assert [dict(c) for c in gender.choices] == [
        {"value": "male", "name": "Male", "key": "m", "clear": True},
        {"value": "female", "name": "Female", "key": "f", "clear": True},
        {"value": "unsure", "name": "Cannot tell", "key": "u"},
        {"value": "other", "name": "Other", "key": "o", "requires_reason": True},
    ]
    assert (gender.kind, gender.unresolvable_value) == ("choice", "unsure")
    assert (glasses.kind, glasses.hotkey, glasses.default_value) == ("toggle", "g", "no")
    assert (objects.kind, objects.choices) == ("classes", ())


def test_a_questions_csv_with_only_the_required_columns_is_read(tmp_path):
    path = questions_file(tmp_path, "hat,Hat?,yes:Yes:y|no:No:n", header="key,text,choices\n")
    [hat] = questions_csv_read(path)
    assert (hat.key, hat.kind, hat.hotkey, hat.default_value) == ("hat", "choice", "", "")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("bad key!,T,a:A:a|b:B:b,,,,,,", "row 2: key must be 1 to 50 letters"),
        (",T,a:A:a|b:B:b,,,,,,", "row 2: key must be"),
        ("k,,a:A:a|b:B:b,,,,,,", "row 2: empty text"),
        ("k," + "t" * 501 + ",a:A:a|b:B:b,,,,,,", "row 2: text is longer than 500 characters"),
        ("k,T,a:A:a,,,,,,", "row 2: a question needs at least two choices"),
        ("k,T,a|b:B:b,,,,,,", "row 2: choice 'a' must be value:Display name:key or value:Display name"),
        ("k,T,a:A:a:x|b:B:b,,,,,,", "row 2: choice 'a:A:a:x' must be value:Display name:key"),
        ("k,T,a:A:ab|b:B:b,,,,,,", "must be value:Display name:key"),
        ("k,T,a:A:a|a:B:b,,,,,,", "row 2: choice values must be unique"),
        ("k,T,a:A:x|b:B:x,,,,,,", "row 2: two choices share the key 'x'"),
        ("k,T,a:A:a|b:B:Z,,,,,,", "row 2: choices key 'z' is the labeling screen's Back key; choose another"),
        ("k,T,a:A:a|b:B:b,toggle,z,,,,", "row 2: hotkey key 'z' is the labeling screen's Back key"),
        ("k,T,a:A:/|b:B:b,,,,,,", "row 2: choices key '/' is the labeling screen's missed-objects key"),
        ("k,T,a:A:a|b:B:b,slider,,,,,", "row 2: kind 'slider' is not one of choice, toggle, boxes, classes"),
        ("k,T,a:A:a|b:B:b,,xy,,,,", "row 2: hotkey must be one character"),
        ("k,T,a:A:a|b:B:b,,,c,,,", "row 2: default 'c' is not one of the choices"),
        ("k,T,a:A:a|b:B:b,,,,c,,", "row 2: unresolvable 'c' is not one of the choices"),
        ("k,T,a:A:a|b:B:b,,,,,c,", "row 2: requires_reason 'c' is not one of the choices"),
        ("k,T,a:A:a|b:B:b,,,,,,c", "row 2: clear 'c' is not one of the choices"),
        ("k,T\x00,a:A:a|b:B:b,,,,,,", "row 2: text contains a NUL character"),
        ("k,T,a:A:a|b:B:b,,,,,,,extra", "row 2: more cells than header columns"),
    ],
)
def test_a_bad_questions_row_is_refused_naming_row_and_field(tmp_path, row, message):
    with pytest.raises(ImportRejected, match=message):
        questions_csv_read(questions_file(tmp_path, row))


def test_a_questions_csv_needs_its_columns_unique_keys_and_one_question(tmp_path):
    with pytest.raises(ImportRejected, match="missing column\\(s\\) choices"):
        questions_csv_read(questions_file(tmp_path, "k,T", header="key,text\n"))
    with pytest.raises(ImportRejected, match="question keys must be unique \\('k' appears twice\\)"):
        questions_csv_read(questions_file(tmp_path, "k,T,a:A:a|b:B:b,,,,,,", "k,U,a:A:a|b:B:b,,,,,,"))
    with pytest.raises(ImportRejected, match="no questions"):
        questions_csv_read(questions_file(tmp_path))


def test_a_questions_file_that_is_not_utf8_or_missing_is_refused(tmp_path):
    path = tmp_path / "q.csv"
    path.write_bytes(QUESTIONS_HEADER.encode() + b"k,\xff,a:A:a|b:B:b\n")
    with pytest.raises(ImportRejected, match="not UTF-8"):
        questions_csv_read(path)
    with pytest.raises(ImportRejected, match="cannot read the questions CSV"):
        questions_csv_read(tmp_path / "missing.csv")


def test_a_new_study_reserves_opened_items_for_the_configured_time(db, settings):
    from studies.services import study_create

    settings.BIASLAB_CLAIM_TIMEOUT_SECONDS = 120
    assert study_create(slug="quick", protocol="gender").claim_timeout_seconds == 120


def _choices(n: int, name: str = "") -> str:
    return "|".join(f"v{i}:{name or f'Answer {i}'}" for i in range(n))


def test_the_labeling_screen_s_bounds_are_accepted_up_to_the_limit(tmp_path):
    rows = [f"q{n},Question {n}?,{_choices(26, 'N' * 200)}" for n in range(50)]
    specs = questions_csv_read(questions_file(tmp_path, *rows, header="key,text,choices\n"))
    assert len(specs) == 50
    assert len(specs[0].choices) == 26
    assert specs[0].choices[0]["name"] == "N" * 200


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            ["k,T," + _choices(2, "N" * 20_000)],
            "row 2: choices: the display name of 'v0' is longer than 200 characters",
        ),
        (["k,T," + _choices(500)], "row 2: choices: 500 answers; a question has at most 26"),
        (
            [f"q{n},T,{_choices(2)}" for n in range(300)],
            "row 52: more than 50 questions; a study asks at most 50",
        ),
    ],
)
def test_a_questions_csv_beyond_what_the_labeling_screen_shows_is_refused(tmp_path, rows, message):
    with pytest.raises(ImportRejected, match=message):
        questions_csv_read(questions_file(tmp_path, *rows, header="key,text,choices\n"))
