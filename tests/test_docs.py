"""The documentation site: its generated reference covers the code, and the tree holds no path of
a development machine. (``bin/test`` builds the site with ``mkdocs build --strict``, which fails
on a broken link or anchor; these tests say *what* is missing, faster.)"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

import pytest
from django.conf import settings
from django.core.management import load_command_class

from detectors import registry

ROOT = Path(settings.BASE_DIR)
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    """docs/_hooks/reference.py, the MkDocs hook that generates the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_reference_hook", DOCS / "_hooks" / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_files() -> dict[str, str]:
    """Every management command file of the project's own apps, found on disk (not through
    Django, so a command Django cannot load still counts)."""
    # An app in a package of its own (protocols.questions) is a folder below the root.
    local_apps = [
        app for app in settings.INSTALLED_APPS if (ROOT / app.replace(".", "/") / "__init__.py").is_file()
    ]
    return {
        path.stem: app
        for app in local_apps
        for path in (ROOT / app.replace(".", "/") / "management" / "commands").glob("*.py")
        if not path.name.startswith("_")
    }


def test_the_project_has_the_commands_the_reference_is_known_to_cover():
    # Guards the listing itself: it must find the project's commands, not an empty set.
    assert {"create_study", "import_images", "run_detectors", "bias_report", "estimate_bias"} <= set(
        command_files()
    )


def test_every_management_command_has_a_generated_reference_page(hook):
    files = command_files()
    assert hook.project_commands() == files, "the hook's apps differ from the project's apps"
    for name, app in files.items():
        page = hook.command_page(name, app)
        assert page.startswith(f"# `{name}`"), name
        parser = load_command_class(app, name).create_parser("manage.py", name)
        for action in parser._actions:
            if action.dest in hook.DJANGO_COMMON or action.help == argparse.SUPPRESS:
                continue
            shown = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            assert shown in page, f"{name}: {shown} is missing from its reference page"


def test_every_command_is_in_the_navigation_and_the_commands_table(hook):
    config = {"nav": [{"Reference": [{"Commands": []}]}]}
    hook.on_config(config)
    entries = config["nav"][0]["Reference"][0]["Commands"]
    table = hook.commands_table()
    for name in command_files():
        assert {name: f"reference/commands/{name}.md"} in entries, name
        assert f"[`{name}`]({name}.md)" in table, name


def test_every_detector_in_the_registry_has_a_row_with_kind_weights_and_speed(hook):
    table = hook.detectors_table()
    for key in registry.DETECTORS:
        row = next((line for line in table.splitlines() if f"`{key}` |" in line), None)
        assert row is not None, f"{key} is missing from the detectors reference"
        cls = registry.detector_class(key)
        # A judge's kind follows the study it answers.
        kind = "answers` or `gender" if cls.needs_questions else cls.output_kind
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[1] == f"`{kind}`", key
        assert cells[3], f"{key}: no weights setting"
        assert cells[4], f"{key}: no measured speed"


def test_every_judge_has_its_options_and_default_template_in_the_reference(hook):
    from detectors.plugins.vlm_judge import DEFAULT_TEMPLATE, VlmJudgeDetector

    page = hook.judges_markdown()
    assert "### `vlm_judge` options" in page
    for option in VlmJudgeDetector.option_help:
        assert f"| `{option}` |" in page, option
    assert f"```text\n{DEFAULT_TEMPLATE}\n```" in page
    assert "<!-- generated: judges -->" in (DOCS / "reference" / "detectors.md").read_text(encoding="utf-8")


def test_a_detector_without_reference_facts_fails_the_build(hook):
    registry.register("undocumented_detector", "tests.fakes.FakeDetector")
    try:
        with pytest.raises(KeyError, match="undocumented_detector"):
            hook.detector_rows()
    finally:
        registry.unregister("undocumented_detector")


def test_every_environment_variable_the_code_reads_is_in_the_settings_reference():
    page = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    read = re.compile(
        r"""(?:env_\w+|environ\.get|getenv)\(\s*["']((?:BIASLAB|DJANGO|DATABASE)_[A-Z0-9_]+)["']"""
    )
    names = set()
    for package in (
        "config",
        "accounts",
        "studies",
        "annotate",
        "detectors",
        "generation",
        "reports",
        "estimates",
        "metrics",
    ):
        for path in (ROOT / package).rglob("*.py"):
            names |= set(read.findall(path.read_text(encoding="utf-8")))
    for path in (ROOT / "bin").iterdir():
        names |= set(re.findall(r"\$\{?(BIASLAB_[A-Z0-9_]+)", path.read_text(encoding="utf-8")))
    assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "BIASLAB_CACHE_URL"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in page)
    assert not missing, f"not in docs/reference/settings.md: {missing}"


# Built from parts so that this file does not match itself.
MACHINE_PATHS = ("../" + "shared" + "/", "/work" + "/", "shared" + "/papers", "ENVIRONMENT" + ".md")
SKIP_DIRS = {
    ".git",
    ".venv",
    "var",
    "site",
    "media",
    "staticfiles",
    "test-output",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".schemathesis",
    "node_modules",
}
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".html",
    ".js",
    ".css",
    ".toml",
    ".txt",
    ".yml",
    ".yaml",
    ".cfg",
    ".ini",
    ".csv",
    ".json",
    ".sh",
    "",
}


def test_no_path_of_a_development_machine_in_the_code_or_the_docs():
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in files:
            path = Path(folder) / name
            if name in SKIP_DIRS or path.suffix not in TEXT_SUFFIXES or path.stat().st_size > 2_000_000:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if any(pattern in line for pattern in MACHINE_PATHS):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "paths of a development machine:\n" + "\n".join(found)


def test_the_readme_is_short_and_points_to_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for command in ("bin/demo", "bin/test", "mkdocs build --strict"):
        assert command in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), f"README links to a missing page: {link}"


def test_a_screenshot_the_browser_tests_took_is_shown_and_a_missing_one_stays_a_comment(hook):
    markdown = "Text.\n\n<!-- screenshot: labeling.png | The labeling screen -->\n\n<!-- screenshot: gone.png | Gone -->\n"
    shown = hook.screenshot_markdown(markdown, "tutorials/gender.md", {"labeling.png"})
    assert "![The labeling screen](../screenshots/labeling.png)" in shown
    assert "<!-- screenshot: gone.png | Gone -->" in shown
    assert "gone.png)" not in shown


def test_screenshots_are_found_in_the_folder_the_browser_tests_write_to(hook, monkeypatch, tmp_path):
    from tests.browser.screenshots import ENV, screenshots_dir

    monkeypatch.setenv(ENV, str(tmp_path / "shots"))
    (screenshots_dir() / "labeling.png").write_bytes(b"\x89PNG")
    assert set(hook.screenshots()) == {"labeling.png"}
    monkeypatch.delenv(ENV)
    assert hook.screenshots() == {}
