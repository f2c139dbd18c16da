from __future__ import annotations

from django.apps import AppConfig


class GenerationConfig(AppConfig):
    """Making a study's images: ``generate_images`` (text-to-image) and ``edit_images`` (seed
    photo + prompt → edited photo). It owns no table: what it makes is stored as the study's
    items and images (``studies.imports.images.item_image_store``)."""

    name = "generation"
    verbose_name = "Image generation and editing"
    default_auto_field = "django.db.models.BigAutoField"
