from __future__ import annotations

from django.apps import AppConfig


class StudiesConfig(AppConfig):
    """The core every other app builds on: studies, their questions, items and image files."""

    name = "studies"
    verbose_name = "Studies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from studies import checks  # noqa: F401  (registers the protocol and question kind checks)
