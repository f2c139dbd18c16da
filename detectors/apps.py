from __future__ import annotations

from django.apps import AppConfig


class DetectorsConfig(AppConfig):
    name = "detectors"
    verbose_name = "Detectors"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from detectors import checks  # noqa: F401  (registers the detector registry check)
