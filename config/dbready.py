"""Is the database migrated? ``manage.py`` asks before a command that reads or writes the tables, so that
it says "run `python manage.py migrate`" in one line (docs/explanation/web-side.md)."""

from __future__ import annotations

import pkgutil
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.core.management import load_command_class
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

MIGRATE = "run `python manage.py migrate`"

#: Django's own commands that read or write tables (the project's own commands all do).
DATABASE_COMMANDS = frozenset(
    {"createsuperuser", "changepassword", "clearsessions", "remove_stale_contenttypes", "drf_create_token"}
)


def command_needs_tables(name: str, app_name: str, argv: Sequence[str] = ()) -> bool:
    """Whether the command ``name`` (of app ``app_name``, as ``get_commands()`` says) works on the tables:
    every command of an app inside the project folder, and a few of Django's own."""
    if name in DATABASE_COMMANDS:
        return True
    try:
        module = import_module(app_name)
    except ImportError:
        return False
    module_file = getattr(module, "__file__", None)
    if module_file is None:
        return False
    path = Path(module_file).resolve()
    # The virtualenv usually lives inside the project folder (.venv): Django's own commands and
    # every installed package's are there too, but never the project's.
    if not path.is_relative_to(settings.BASE_DIR) or "site-packages" in path.parts:
        return False
    migrates_with = getattr(load_command_class(app_name, name), "migrates_with", None)
    return not (migrates_with and migrates_with in argv)


def _migration_files() -> set[tuple[str, str]]:
    """(app label, migration name) of every migration file on disk (Django skips names starting
    with ``_`` or ``~``, and so does this)."""
    found: set[tuple[str, str]] = set()
    for config in apps.get_app_configs():
        module_name, _ = MigrationLoader.migrations_module(config.label)
        if module_name is None:
            continue
        try:
            module = import_module(module_name)
        except ImportError:
            continue
        for _, name, is_package in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if not is_package and name[0] not in "_~":
                found.add((config.label, name))
    return found


def database_unready(alias: str = DEFAULT_DB_ALIAS) -> str | None:
    """Why the database cannot serve BiasLab's commands yet, as one line; None when it can."""
    connection = connections[alias]
    name = str(connection.settings_dict.get("NAME") or "")
    on_disk = connection.vendor == "sqlite" and name and name != ":memory:" and not name.startswith("file:")
    if on_disk and not Path(name).exists():
        return f"The database {name} does not exist yet: {MIGRATE} to create it."
    try:
        recorder = MigrationRecorder(connection)
        if not recorder.has_table():
            return f"The database {connection.settings_dict.get('NAME')} has no tables yet: {MIGRATE}."
        applied = set(recorder.applied_migrations())
    except DatabaseError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        return f"Cannot use the database ({first_line}): check DATABASE_URL."
    missing = sorted(_migration_files() - applied)
    if missing:
        shown = ", ".join(f"{label}.{migration}" for label, migration in missing[:3])
        more = ", …" if len(missing) > 3 else ""
        return f"The database lacks {len(missing)} migration(s) ({shown}{more}): {MIGRATE}."
    return None
