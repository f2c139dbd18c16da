#!/usr/bin/env python
"""Django's command-line utility for BiasLab."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Read the settings before any command does: a refusal (production mode without a strong
        # secret, a malformed DATABASE_URL) is then one clear message, not a traceback ending in
        # AppRegistryNotReady.
        settings.DEBUG  # noqa: B018
    except ImproperlyConfigured as exc:
        hint = ""
        if "DJANGO_DEBUG" in str(exc) or "production mode" in str(exc):
            hint = "To run commands on your own machine: export DJANGO_DEBUG=1 (bin/demo and bin/test do).\n"
        sys.stderr.write(f"manage.py: {exc}\n{hint}")
        sys.exit(2)
    _database_ready_or_exit(sys.argv)
    execute_from_command_line(sys.argv)


def _database_ready_or_exit(argv: list[str]) -> None:
    """Before a command that works on the tables, check once that the database is migrated:
    otherwise say "run `python manage.py migrate`" in one line (not "no such table" from deep
    inside the command). Help (``-h``/``--help``) and Django's own commands that need no tables
    (migrate, check, shell …) are never held back."""
    if len(argv) < 2 or argv[1].startswith("-") or {"-h", "--help"} & set(argv[2:]):
        return
    import django
    from django.core.management import get_commands

    django.setup()
    app_name = get_commands().get(argv[1])
    if app_name is None:
        return  # Django's own "Unknown command" answers it

    from config.dbready import command_needs_tables, database_unready

    if command_needs_tables(argv[1], app_name, argv[2:]):
        problem = database_unready()
        if problem:
            sys.stderr.write(f"manage.py {argv[1]}: {problem}\n")
            sys.exit(2)


if __name__ == "__main__":
    main()
