from __future__ import annotations

from django.apps import AppConfig


class EstimatesConfig(AppConfig):
    name = "estimates"
    verbose_name = "Bias estimates from sampled labels"
    default_auto_field = "django.db.models.BigAutoField"
