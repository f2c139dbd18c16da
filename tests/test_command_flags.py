"""Every management command of the project agrees on the flags they share: read from
each command's argparse parser, so a new command (or a protocol's) that spells one of them its
own way fails here. The definitions live once in ``studies/commands.py``.

- ``--study``: the one rule and its help (``STUDY_HELP``) in a command working on one study —
  and that command is in the behaviour tests of tests/studies/test_study_option.py; the filter
  meaning (``STUDY_FILTER_HELP``, "every study") only in the commands that work across studies.
- An importer (``import_*``) takes its file as its first positional argument, ``FILE``; no command
  takes a file through ``--file``, and ``--manifest`` lives on only as an alias.
- ``--format``: the choices of its kind — exports (``export_*``) print rows, the others reports —
  the default first; a command with ``--format`` also takes ``--output`` (the shared one)."""

from __future__ import annotations

import argparse
from importlib import import_module
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from studies.commands import FORMATS, OUTPUT_HELP, STUDY_FILTER_HELP, STUDY_HELP
from tests.studies.test_study_option import COMMANDS as ONE_STUDY_BEHAVIOUR

ROOT = Path(__file__).resolve().parent.parent
#: The commands that work across studies, where --study filters (left out: every study).
EVERY_STUDY = {"run_detectors", "export_predictions", "import_predictions"}


def _ours(app: str) -> bool:
    """An app of this repository (not Django's, DRF's or another dependency's)."""
    folder = Path(import_module(app).__path__[0]).resolve()
    return folder.is_relative_to(ROOT) and not folder.is_relative_to(ROOT / ".venv")


def project_commands() -> dict[str, str]:
    return {name: app for name, app in sorted(get_commands().items()) if _ours(app)}


def parser_of(name: str) -> argparse.ArgumentParser:
    return load_command_class(project_commands()[name], name).create_parser("manage.py", name)


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


COMMANDS = sorted(project_commands())


def test_the_walk_finds_the_commands_of_every_app_and_only_those():
    apps = set(project_commands().values())
    assert {"studies", "annotate", "detectors", "generation", "reports", "estimates"} <= apps
    assert {"import_images", "agreement", "bias_report", "export_sampling", "questions_demo"} <= set(COMMANDS)
    assert not {"migrate", "runserver"} & set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_study_has_one_meaning_and_one_help(name):
    study = option(parser_of(name), "--study")
    if study is None:
        return
    rule = getattr(study, "study_rule", None)
    assert rule in ("one", "every"), f"{name}: --study not defined by studies.commands.add_study_argument"
    assert (study.required, study.default) == (False, ""), f"{name}: --study is optional (the rule decides)"
    if rule == "every":
        assert name in EVERY_STUDY, f"{name}: --study as a filter ('every study') is kept for {EVERY_STUDY}"
        assert study.help.startswith(STUDY_FILTER_HELP)
    else:
        assert name not in EVERY_STUDY, f"{name} works across studies: add_study_argument(every=True)"
        assert study.help.startswith(STUDY_HELP)
        tested = {command for command, _args in ONE_STUDY_BEHAVIOUR}
        assert name in tested, f"{name}: add it to tests/studies/test_study_option.py COMMANDS"


@pytest.mark.parametrize("name", COMMANDS)
def test_an_importer_takes_its_file_first_and_positionally(name):
    parser = parser_of(name)
    positionals = [a for a in parser._actions if not a.option_strings]
    files = [a for a in parser._actions if getattr(a, "importer_file", False)]
    if name.startswith("import_"):
        assert files, f"{name}: an importer takes FILE (studies.commands.add_file_argument)"
        assert positionals[0] is files[0], f"{name}: FILE must be its first argument"
    for action in files:
        assert (action.dest, action.metavar) == ("file", "FILE")
    assert option(parser, "--file") is None, (
        f"{name}: a file is positional (studies.commands.add_file_argument)"
    )
    manifest = option(parser, "--manifest")
    assert manifest is None or manifest.dest == "file_alias", f"{name}: --manifest is only an alias of FILE"


@pytest.mark.parametrize("name", COMMANDS)
def test_format_offers_the_choices_of_its_kind_and_output_goes_with_it(name):
    parser = parser_of(name)
    fmt, output = option(parser, "--format"), option(parser, "--output")
    if output is not None:
        assert (output.help, output.default) == (OUTPUT_HELP, ""), f"{name}: use add_output_argument"
    if fmt is None:
        return
    kind = "rows" if name.startswith("export_") else "report"
    assert getattr(fmt, "format_kind", None) == kind, f"{name}: add_format_argument(parser, {kind!r})"
    assert tuple(fmt.choices) == FORMATS[kind] + fmt.format_aliases
    assert fmt.default == FORMATS[kind][0]
    assert output is not None, f"{name} prints a document: it takes --output too"


def test_the_kept_spellings_are_the_ones_scripts_used():
    assert option(parser_of("import_images"), "--manifest").dest == "file_alias"
    assert option(parser_of("remove_items"), "--manifest").dest == "file_alias"
    assert option(parser_of("agreement"), "--format").format_aliases == ("text",)
