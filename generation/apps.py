from __future__ import annotations

from django.apps import AppConfig


class GenerationConfig(AppConfig):
    """Making a study's images: ``generate_images`` (text-to-image) and ``edit_images`` (seed photo + prompt →
    edited photo)."""

    name = "generation"
    verbose_name = "Image generation and editing"
    default_auto_field = "django.db.models.BigAutoField"
