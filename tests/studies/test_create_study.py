"""``manage.py create_study``: the contract of the command line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.models import Question, Study
from studies.protocols import PROTOCOLS
from tests.annotate.gender import label_import
from tests.factories import ItemFactory, PromptFactory, UserFactory


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("create_study", *args, stdout=out)
    return out.getvalue()


def snapshot() -> tuple[list, list]:
    return (
        list(Study.objects.order_by("id").values()),
        list(Question.objects.order_by("id").values()),
    )


# Protocols with preset questions; one whose questions come from a CSV alone (questions) has
# its own creation tests (tests/protocols/questions/test_end_to_end.py).
PRESETS = [key for key, spec in PROTOCOLS.items() if spec.questions]


@pytest.mark.parametrize("protocol", PRESETS)
def test_each_protocol_can_be_created_and_running_it_again_changes_nothing(db, protocol):
    text = run("s1", "--protocol", protocol)
    study = Study.objects.get(slug="s1")
    assert study.protocol == protocol
    assert text.startswith(f"Created study 's1' ({protocol}, {study.questions.count()} question(s)")
    before = snapshot()
    assert run("s1", "--protocol", protocol) == "Study 's1' already exists as defined; nothing changed.\n"
    assert snapshot() == before


def test_every_option_is_stored_and_the_same_options_again_change_nothing(db, tmp_path):
    questions = tmp_path / "q.csv"
    questions.write_text(
        "key,text,choices\nage,Older or younger?,older:Older:o|younger:Younger:y|same:Same:s\n",
        encoding="utf-8",
    )
    args = (
        "edits",
        "--protocol",
        "pair_change",
        "--name",
        "Edits",
        "--labels-per-item",
        "3",
        "--agreement",
        "majority",
        "--questions",
        str(questions),
    )
    run(*args)
    study = Study.objects.get(slug="edits")
    assert (study.name, study.labels_per_item, study.agreement) == ("Edits", 3, "majority")
    assert [q.key for q in study.questions.all()] == ["age"]
    assert study.parameters == {"thresholds": {"age": 25.0, "skin": 20.0}}
    before = snapshot()
    assert "nothing changed" in run(*args)
    assert snapshot() == before


def test_without_questions_the_protocols_preset_is_used(db):
    run("clothes", "--protocol", "attributes")
    study = Study.objects.get(slug="clothes")
    assert study.questions.count() == 15
    assert (study.labels_per_item, study.agreement) == (3, "majority")


def test_different_arguments_on_a_study_without_labels_are_applied(db):
    run("g", "--protocol", "gender")
    assert (
        run("g", "--protocol", "gender", "--labels-per-item", "3") == "Updated study 'g': labels_per_item.\n"
    )
    assert Study.objects.get(slug="g").labels_per_item == 3


def test_different_arguments_on_a_study_with_labels_are_a_clear_error(db):
    run("g", "--protocol", "gender")
    study = Study.objects.get(slug="g")
    label_import(item=ItemFactory(prompt=PromptFactory(study=study)), annotator=UserFactory(), value="female")
    before = snapshot()
    with pytest.raises(
        CommandError,
        match="The study “g” already has labels: its protocol, labels_per_item, agreement, questions cannot change",
    ):
        run("g", "--protocol", "attributes")
    with pytest.raises(CommandError, match="already has labels: its labels_per_item cannot change"):
        run("g", "--protocol", "gender", "--labels-per-item", "4")
    assert snapshot() == before
    assert "nothing changed" in run("g", "--protocol", "gender")


def test_a_bad_questions_file_is_a_clear_error_and_creates_nothing(db, tmp_path):
    questions = tmp_path / "q.csv"
    questions.write_text("key,text,choices\nmood,Mood?,happy:Happy:h\n", encoding="utf-8")
    with pytest.raises(CommandError, match="row 2: a question needs at least two choices"):
        run("m", "--protocol", "gender", "--questions", str(questions))
    with pytest.raises(CommandError, match="cannot read the questions CSV"):
        run("m", "--protocol", "gender", "--questions", str(Path(tmp_path) / "none.csv"))
    assert not Study.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bad slug!", "--protocol", "gender"), "must be at most 200 letters, digits"),
        (("s" * 201, "--protocol", "gender"), "must be at most 200 letters, digits"),
        (("s", "--protocol", "gender", "--agreement", "majority"), "A majority needs at least 3 labels"),
        (("s", "--protocol", "gender", "--labels-per-item", "0"), "between 1 and 32767"),
    ],
)
def test_impossible_arguments_are_refused_with_a_message(db, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Study.objects.exists()


def test_an_unknown_protocol_is_refused_by_the_parser(db):
    with pytest.raises(CommandError, match="invalid choice: 'faces'"):
        run("s", "--protocol", "faces")


# --- questions the protocol cannot use are refused at creation ---------------


def _questions(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "q.csv"
    path.write_text("key,text,choices,clear\n" + "".join(f"{row}\n" for row in rows), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["age,Old or young?,old:Old:o|young:Young:y,"], "a gender study needs a question with key 'gender'"),
        (["gender,Gender?,male:Male:m|female:Female:f,"], "must mark exactly two choices as clear"),
        (["gender,Gender?,male:Male:m|female:Female:f|x:X:x,male|female|x"], r"not 3 \(male, female, x\)"),
    ],
    ids=["no-gender-question", "no-clear-answers", "three-clear-answers"],
)
def test_a_gender_study_whose_questions_its_report_cannot_read_is_refused_at_creation(
    db, tmp_path, rows, message
):
    with pytest.raises(CommandError, match=message):
        run("g", "--protocol", "gender", "--questions", _questions(tmp_path, *rows))
    assert not Study.objects.exists()


def test_a_gender_study_with_a_gender_question_of_its_own_is_created(db, tmp_path):
    rows = [
        "gender,Gender?,man:Man:m|woman:Woman:w|unsure:Unsure:u,man|woman",
        "age,Age?,old:Old|young:Young",
    ]
    run("g", "--protocol", "gender", "--questions", _questions(tmp_path, *rows))
    assert list(Study.objects.get(slug="g").questions.values_list("key", flat=True)) == ["gender", "age"]


def test_an_attributes_study_needs_yes_no_questions(db, tmp_path):
    with pytest.raises(CommandError, match="question 'hat' has the answers maybe, yes; an attributes study"):
        run(
            "a",
            "--protocol",
            "attributes",
            "--questions",
            _questions(tmp_path, "hat,Hat?,yes:Yes|maybe:Maybe,"),
        )
    assert not Study.objects.exists()


def test_changing_an_existing_studys_questions_is_checked_too(db, tmp_path):
    run("g", "--protocol", "gender")
    with pytest.raises(CommandError, match="a gender study needs a question with key 'gender'"):
        run("g", "--protocol", "gender", "--questions", _questions(tmp_path, "age,Age?,old:Old|young:Young,"))
    assert list(Study.objects.get(slug="g").questions.values_list("key", flat=True)) == ["gender"]


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_every_protocols_preset_passes_its_own_question_check(protocol):
    spec = PROTOCOLS[protocol]
    assert spec.validate_questions(spec.questions) is None


def test_a_choice_without_a_key_may_leave_out_its_last_colon(db, tmp_path):
    """The hint says "(a one-character key, or none)": ``old:Old`` and ``old:Old:`` both mean no key."""
    rows = ["age,Age?,old:Old|young:Young:|same:Same:s,"]
    run("p", "--protocol", "pair_change", "--questions", _questions(tmp_path, *rows))
    [age] = Study.objects.get(slug="p").questions.all()
    assert [(c["value"], c["name"], c["key"]) for c in age.choices] == [
        ("old", "Old", ""),
        ("young", "Young", ""),
        ("same", "Same", "s"),
    ]


def _questions_csv(tmp_path: Path) -> str:
    path = tmp_path / "questions.csv"
    path.write_text("key,text,choices\nmood,Mood?,happy:Happy|sad:Sad\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("column", ["image", "params", "item", "role", "questions"])
def test_compare_refuses_a_column_no_item_keeps_listing_those_that_work(db, tmp_path, column):
    with pytest.raises(CommandError) as refused:
        run("qs", "--protocol", "questions", "--questions", _questions_csv(tmp_path), "--compare", column)
    message = str(refused.value)
    assert f"--compare {column}: an item keeps no value of the manifest column '{column}'" in message
    assert "Use one of t2i_model, prompt, category, word, seed, index, or a column of your own" in message
    assert not Study.objects.exists()
    run("qs", "--protocol", "questions", "--questions", _questions_csv(tmp_path), "--compare", "word")
    assert Study.objects.get(slug="qs").parameters == {"compare": "word"}


def test_a_missing_compare_names_the_flag_and_its_value_without_pasting_the_help(db, tmp_path):
    with pytest.raises(CommandError) as refused:
        run("qs", "--protocol", "questions", "--questions", _questions_csv(tmp_path))
    assert str(refused.value) == (
        "A questions study needs --compare COLUMN (see `manage.py create_study --help`)."
    )


def test_the_help_shows_column_not_the_options_internal_name():
    from studies.management.commands.create_study import Command

    text = Command().create_parser("manage.py", "create_study").format_help()
    assert "--compare COLUMN" in text
    assert "OPTION_" not in text


def test_without_a_protocol_the_command_names_every_protocol_and_creates_nothing(db):
    with pytest.raises(CommandError) as refused:
        run("s1")
    message = str(refused.value)
    assert message.startswith("create_study needs --protocol, one of: ")
    for key, spec in PROTOCOLS.items():
        assert f"{key} ({spec.title or key})" in message
    assert not Study.objects.exists()
