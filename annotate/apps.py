from __future__ import annotations

from django.apps import AppConfig


class AnnotateConfig(AppConfig):
    name = "annotate"
    verbose_name = "Annotation"
    default_auto_field = "django.db.models.BigAutoField"
