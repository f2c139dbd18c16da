from __future__ import annotations

from django.apps import AppConfig


class CrowdConfig(AppConfig):
    name = "crowd"
    verbose_name = "Crowd panels"
    default_auto_field = "django.db.models.BigAutoField"
