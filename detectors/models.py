"""Model output: generation and detector runs, and one prediction per (image, detector, version).

Predictions are kept apart from human labels (``annotate.Label``). A failure to predict is its
own status with its error, never a fake verdict.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.utils import timezone

from annotate.models import Image, Study


class Verdict(models.TextChoices):
    MALE = "male", "Male"
    FEMALE = "female", "Female"
    FILTERED = "filtered", "Filtered (low quality)"


class FilterReason(models.TextChoices):
    """Why a detector set an image aside instead of giving it a gender."""

    NO_FACE = "no_face", "No face"
    NO_PERSON = "no_person", "No person"
    SEVERAL_PEOPLE = "several_people", "Several people"
    LOW_CONFIDENCE = "low_confidence", "Low confidence"
    UNCERTAIN = "uncertain", "Uncertain answer"
    NOT_A_PERSON = "not_a_person", "Not a person"
    UNPARSEABLE = "unparseable", "Answer not understood"
    API_ERROR = "api_error", "API error"
    OTHER = "other", "Other"


class PredictionStatus(models.TextChoices):
    OK = "ok", "Predicted"
    FAILED = "failed", "Failed"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    INTERRUPTED = "interrupted", "Interrupted"
    FAILED = "failed", "Failed"


#: A running run whose counters have not moved for this long is shown as stale on the runs page.
STALE_AFTER = timedelta(minutes=15)


class DetectorRun(models.Model):
    """One invocation of ``run_detectors``; researchers watch status, counts and speed."""

    study = models.ForeignKey(
        Study,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="detector_runs",
        help_text="Only images of this study, if set; empty when the run covers every study.",
    )
    detector = models.CharField(max_length=100, help_text="Registry key, e.g. clip_enhance.")
    version = models.CharField(max_length=200, help_text="Detector version string (weights + code).")
    t2i_model = models.CharField(
        max_length=200, blank=True, help_text="Only images of this T2I model, if set."
    )
    shard = models.CharField(max_length=20, blank=True, help_text="i/n when several workers share a run.")
    device = models.CharField(max_length=50, blank=True)
    batch_size = models.PositiveIntegerField(default=1)
    host = models.CharField(max_length=200, blank=True, help_text="Machine that ran it.")
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.RUNNING)
    n_total = models.PositiveIntegerField(default=0, help_text="Images this run had to predict.")
    n_done = models.PositiveIntegerField(default=0, help_text="Predictions stored (ok).")
    n_failed = models.PositiveIntegerField(default=0, help_text="Failures stored with their error.")
    n_skipped = models.PositiveIntegerField(default=0, help_text="Images already predicted before the run.")
    seconds = models.FloatField(default=0.0, help_text="Wall time spent predicting.")
    error = models.TextField(blank=True, help_text="Why the run failed, if it did.")
    started_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.detector}@{self.version} ({self.status})"

    @property
    def looks_stale(self) -> bool:
        """Running, but no batch stored for a while: the worker was probably killed (SIGKILL, OOM,
        power) before it could mark the run failed or interrupted."""
        return self.status == RunStatus.RUNNING and timezone.now() - self.updated_at > STALE_AFTER

    @property
    def images_per_second(self) -> float | None:
        processed = self.n_done + self.n_failed
        return processed / self.seconds if self.seconds > 0 else None


class Prediction(models.Model):
    """What one detector (at one version) said about one image."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="predictions")
    detector = models.CharField(max_length=100, help_text="Registry key, e.g. clip, or the name as imported.")
    version = models.CharField(
        max_length=200, help_text="Detector version; a new version is a new prediction."
    )
    status = models.CharField(max_length=10, choices=PredictionStatus.choices, default=PredictionStatus.OK)
    verdict = models.CharField(
        max_length=10, choices=Verdict.choices, blank=True, help_text="Empty only when status is failed."
    )
    filter_reason = models.CharField(
        max_length=30, choices=FilterReason.choices, blank=True, help_text="Why the image was filtered."
    )
    detail = models.TextField(
        blank=True, help_text="Free text kept with the verdict, e.g. BLIP-2's raw answer."
    )
    scores = models.JSONField(
        default=dict, blank=True, help_text="Raw scores, e.g. {'male': 0.93, 'female': 0.07}."
    )
    error = models.TextField(blank=True, help_text="The error when status is failed.")
    seconds = models.FloatField(null=True, blank=True, help_text="Time spent on this image.")
    run = models.ForeignKey(
        DetectorRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="predictions"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["image", "detector", "version"], name="prediction_unique_version"
            ),
            models.CheckConstraint(
                condition=(Q(status="ok") & ~Q(verdict="")) | (Q(status="failed") & Q(verdict="")),
                name="prediction_verdict_matches_status",
            ),
            models.CheckConstraint(
                condition=Q(verdict="filtered") | Q(filter_reason=""),
                name="prediction_reason_only_when_filtered",
            ),
        ]
        indexes = [models.Index(fields=["detector", "status", "verdict"])]

    def __str__(self) -> str:
        return f"{self.detector}@{self.version} {self.image_id}: {self.verdict or self.status}"
