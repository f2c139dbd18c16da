"""Sampling rounds in the admin, read only: π is fixed before the draw and never changes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from estimates.models import RoundItem, SamplingRound


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SamplingRound)
class SamplingRoundAdmin(_ReadOnly):
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
class RoundItemAdmin(_ReadOnly):
    list_display = ("id", "round", "item", "pi", "selected")
    list_filter = ("selected",)
    list_select_related = ("round", "item")
