"""``--study`` means the same in every command that works on one study: the study
named; without it the only study there is; with several and none named, a refusal listing them;
an unknown slug, a refusal listing them and naming create_study (studies.selectors.study_chosen)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from studies.errors import StudyNotChosen
from studies.selectors import study_chosen
from tests.factories import StudyFactory

pytestmark = pytest.mark.django_db

# (command, its other arguments): every command that works on one study (tests/test_command_flags.py
# fails on one missing here).
COMMANDS = [
    ("export_ground_truth", []),
    ("agreement", []),
    ("bias_report", []),
    ("import_labels", ["{csv}"]),
    ("import_ground_truth", ["{csv}"]),
    ("import_images", ["{csv}", "--root", "{root}"]),
    ("remove_items", ["--item", "x"]),
    ("estimate_bias", ["--detector", "fake"]),
    ("sample_for_labeling", ["--detector", "fake", "--budget", "3"]),
    ("export_sampling", []),
    ("generate_images", ["--t2i-model", "sd15", "--prompt-set", "{csv}"]),
    ("edit_images", ["--seeds", "{root}", "--prompt-set", "{csv}", "--editor", "sd15"]),
    ("prepare_box_check", ["--detector", "yolo_objects"]),
    ("sample_pairs", ["--attribute", "age"]),
    ("add_annotators", ["alice"]),
    ("create_join_link", ["--quota", "5", "--completion-url", "https://x.org/", "--completion-code", "C"]),
    ("import_gold", ["{csv}"]),
    ("exclude_annotator", ["nobody"]),
    ("recompute_finals", []),
]


def _run(command: str, args: list[str], csv: str, **options: str) -> str:
    out = io.StringIO()
    call_command(
        command,
        *[a.format(csv=csv, root=str(Path(csv).parent)) for a in args],
        stdout=out,
        stderr=io.StringIO(),
        **options,
    )
    return out.getvalue()


@pytest.mark.parametrize(("command", "args"), COMMANDS)
def test_every_command_refuses_to_guess_among_several_studies(command, args, tmp_path):
    StudyFactory(slug="alpha")
    StudyFactory(slug="beta")
    csv = tmp_path / "in.csv"
    csv.write_text("image\n")
    with pytest.raises(
        CommandError, match=r"several studies: choose one with --study \(existing studies: alpha, beta\)"
    ):
        _run(command, args, str(csv))


@pytest.mark.parametrize(("command", "args"), COMMANDS)
def test_every_command_names_the_studies_and_the_nearest_slug_for_an_unknown_one(command, args, tmp_path):
    StudyFactory(slug="alpha")
    csv = tmp_path / "in.csv"
    csv.write_text("image\n")
    # A typo: the nearest existing slug, not "create the typo".
    with pytest.raises(CommandError) as typo:
        _run(command, args, str(csv), study="alhpa")
    assert "No study with slug 'alhpa' (existing studies: alpha); did you mean 'alpha'?" in str(typo.value)
    assert "create_study alhpa" not in str(typo.value)
    # Nothing near: how a study is made, with a placeholder for its slug.
    with pytest.raises(CommandError) as far:
        _run(command, args, str(csv), study="zzz")
    assert "create_study SLUG --protocol" in str(far.value)


def test_without_a_slug_the_only_study_is_used():
    only = StudyFactory(slug="only")
    assert study_chosen("") == only
    assert study_chosen(None) == only
    assert "only" in _run("export_ground_truth", [], "", format="json")


def test_without_any_study_the_refusal_names_create_study():
    with pytest.raises(
        StudyNotChosen, match=r"There is no study yet: create one with `manage\.py create_study"
    ):
        study_chosen("")
