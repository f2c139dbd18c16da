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
        # secret) is then one clear message, not a traceback ending in AppRegistryNotReady.
        settings.DEBUG  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.stderr.write(
            f"manage.py: {exc}\n"
            "To run commands on your own machine: export DJANGO_DEBUG=1 (bin/demo and bin/test do).\n"
        )
        sys.exit(2)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
