"""Admin for runs, predictions and a judge's cached answers: read and delete (deleting failed predictions lets
a run retry them; deleting cached answers makes a judge ask again)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from detectors.models import DetectorRun, JudgeResponse, Prediction


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(DetectorRun)
class DetectorRunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "detector",
        "version",
        "study",
        "t2i_model",
        "shard",
        "status",
        "n_done",
        "n_failed",
        "n_total",
        "host",
        "started_at",
        "finished_at",
    )
    list_filter = ("status", "detector")
    search_fields = ("detector", "version", "host", "error")


@admin.register(Prediction)
class PredictionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "image",
        "detector",
        "version",
        "kind",
        "status",
        "verdict",
        "filter_reason",
        "seconds",
    )
    list_filter = ("detector", "kind", "status")
    search_fields = ("image__item_images__source_path", "image__sha256", "detector", "version", "error")
    list_select_related = ("image",)
    raw_id_fields = ("image", "run")


@admin.register(JudgeResponse)
class JudgeResponseAdmin(ReadOnlyAdmin):
    list_display = ("id", "model", "image_sha256", "question", "mode", "content", "created_at")
    list_filter = ("model", "mode")
    search_fields = ("model", "image_sha256", "question", "content")
