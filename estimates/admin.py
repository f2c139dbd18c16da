"""Sampling rounds in the admin, read only: π is fixed before the draw and never changes."""

from __future__ import annotations

from django.contrib import admin

from annotate.admin import ReadOnlyAdmin
from estimates.models import RoundItem, SamplingRound


@admin.register(SamplingRound)
class SamplingRoundAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "study",
        "number",
        "detector",
        "detector_version",
        "design",
        "budget",
        "n_selected",
        "created_at",
        "created_by",
    )
    list_filter = ("design", "detector")


@admin.register(RoundItem)
class RoundItemAdmin(ReadOnlyAdmin):
    list_display = ("id", "round", "item", "pi", "selected")
    list_filter = ("selected",)
    list_select_related = ("round", "item")
