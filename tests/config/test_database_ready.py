"""A new or malformed ``DATABASE_URL`` ("Bad input"): before ``migrate`` any
command that works on the tables says "run `python manage.py migrate`" in one line (it died
with "no such table"); a URL that cannot be read is one line, not a traceback; a relative SQLite
path is relative to the project folder and no failed command leaves an empty database file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config import dbready
from config.env import env_database

MIGRATE = "run `python manage.py migrate`"


# --- reading the URL ----------------------------------------------------------------------------


def test_a_relative_sqlite_path_is_relative_to_the_project_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///var/other.sqlite3")
    assert env_database("DATABASE_URL", "", base_dir=tmp_path)["NAME"] == str(
        tmp_path / "var" / "other.sqlite3"
    )
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/abs.sqlite3")
    assert env_database("DATABASE_URL", "", base_dir=Path("/elsewhere"))["NAME"] == f"{tmp_path}/abs.sqlite3"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://user:pw@host:notaport/db", "DATABASE_URL is not a database URL Django can use"),
        ("mysqlx://host/db", "Scheme 'mysqlx://' is unknown"),
        ("not a url", "DATABASE_URL is not a database URL Django can use"),
        ("sqlite://biaslab.sqlite3", "names no database file"),
    ],
)
def test_a_url_that_cannot_be_read_is_one_clear_error(monkeypatch, tmp_path, url, message):
    monkeypatch.setenv("DATABASE_URL", url)
    with pytest.raises(ImproperlyConfigured, match=message) as info:
        env_database("DATABASE_URL", "", base_dir=tmp_path)
    assert "\n" not in str(info.value)
    assert "pw" not in str(info.value)  # never the password


# --- the migrate check --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_migrated_test_database_is_ready():
    assert dbready.database_unready() is None


@pytest.mark.django_db
def test_a_migration_on_disk_but_not_applied_says_run_migrate(monkeypatch):
    on_disk = dbready._migration_files()
    monkeypatch.setattr(dbready, "_migration_files", lambda: on_disk | {("studies", "9999_new")})
    assert dbready.database_unready() == f"The database lacks 1 migration(s) (studies.9999_new): {MIGRATE}."


def test_which_commands_need_the_tables():
    from django.core.management import get_commands

    commands = get_commands()
    needs = {name for name, app in commands.items() if dbready.command_needs_tables(name, app)}
    assert {
        "create_study",
        "import_images",
        "run_detectors",
        "import_predictions",
        "createsuperuser",
    } <= needs
    assert not {"migrate", "check", "help", "shell", "makemigrations", "showmigrations"} & needs


def test_a_command_asked_to_migrate_first_is_not_held_back():
    # bin/demo runs `seed_demo --migrate` on a new database: the check must let it migrate.
    assert dbready.command_needs_tables("seed_demo", "annotate")
    assert not dbready.command_needs_tables("seed_demo", "annotate", ["--migrate", "--run-detectors"])
    assert dbready.command_needs_tables("create_study", "studies", ["--migrate"])


def _manage(tmp_path: Path, *args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "BIASLAB_")) and k != "DATABASE_URL"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="1",
        BIASLAB_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=url,
    )
    return subprocess.run(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
def test_a_command_on_a_new_database_says_run_migrate_and_creates_no_file(tmp_path):
    database = tmp_path / "new.sqlite3"
    result = _manage(tmp_path, "create_study", "s", "--protocol", "gender", url=f"sqlite:///{database}")
    assert result.returncode == 2
    assert result.stderr == (
        f"manage.py create_study: The database {database} does not exist yet: {MIGRATE} to create it.\n"
    )
    assert not database.exists()


@pytest.mark.subprocess
def test_a_command_on_an_empty_database_says_run_migrate_then_works_after_migrate(tmp_path):
    database = tmp_path / "empty.sqlite3"
    database.touch()
    url = f"sqlite:///{database}"
    result = _manage(tmp_path, "create_study", "s", "--protocol", "gender", url=url)
    assert (result.returncode, result.stderr) == (
        2,
        f"manage.py create_study: The database {database} has no tables yet: {MIGRATE}.\n",
    )
    assert _manage(tmp_path, "migrate", "-v0", url=url).returncode == 0
    created = _manage(tmp_path, "create_study", "s", "--protocol", "gender", url=url)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("Created study 's'")


@pytest.mark.subprocess
def test_a_relative_sqlite_url_leaves_no_database_file_in_the_repository(tmp_path):
    name = f"biaslab-test-{os.getpid()}.sqlite3"
    result = _manage(tmp_path, "import_images", "--manifest", "m.csv", "--root", ".", url=f"sqlite:///{name}")
    assert result.returncode == 2
    assert f"The database {Path(settings.BASE_DIR) / name} does not exist yet" in result.stderr
    assert not (Path(settings.BASE_DIR) / name).exists()
    assert not (tmp_path / name).exists()


@pytest.mark.subprocess
def test_a_malformed_database_url_is_one_line_not_a_traceback(tmp_path):
    result = _manage(
        tmp_path, "create_study", "s", "--protocol", "gender", url="postgres://u:secret@h:port/db"
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("manage.py: DATABASE_URL is not a database URL Django can use")
    assert result.stderr.count("\n") == 1
    assert "secret" not in result.stderr


@pytest.mark.subprocess
def test_help_needs_no_database(tmp_path):
    result = _manage(tmp_path, "create_study", "--help", url=f"sqlite:///{tmp_path / 'none.sqlite3'}")
    assert result.returncode == 0
    assert "usage:" in result.stdout
