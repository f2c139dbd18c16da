from __future__ import annotations

from django.apps import AppConfig


class QualityConfig(AppConfig):
    """Quality control of the human side: gold items, annotator exclusion, reliability."""

    name = "quality"
    verbose_name = "Quality control"
    default_auto_field = "django.db.models.BigAutoField"
