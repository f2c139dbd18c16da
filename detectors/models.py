"""Model output: detector runs, and one prediction per (image file, detector, version)."""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.utils import timezone

from detectors.kinds import KIND_GENDER, kind_choices
from studies.models import Image, Study


class Verdict(models.TextChoices):
    MALE = "male", "Male"
    FEMALE = "female", "Female"
    FILTERED = "filtered", "Filtered (low quality)"


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
    # What a detector behind a remote API spent (api_judge); zero for the others.
    requests = models.PositiveIntegerField(default=0, help_text="HTTP requests sent, retries included.")
    cache_hits = models.PositiveIntegerField(
        default=0, help_text="Answers read from the response cache instead of asked again."
    )
    prompt_tokens = models.PositiveBigIntegerField(default=0, help_text="Prompt tokens the server counted.")
    completion_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Completion tokens the server counted."
    )
    cost_usd = models.FloatField(
        null=True,
        blank=True,
        help_text="Cost in US dollars at the run's usd_per_1k_tokens; empty without it.",
    )
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
    """What one detector (at one version) said about one image file."""

    # No index of its own: the unique (image, detector, version) constraint leads with it.
    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="predictions", db_index=False)
    detector = models.CharField(max_length=100, help_text="Registry key, e.g. clip, or the name as imported.")
    version = models.CharField(
        max_length=200, help_text="Detector version; a new version is a new prediction."
    )
    kind = models.CharField(
        max_length=20,
        choices=kind_choices,
        default=KIND_GENDER,
        help_text="The kind of output the detector declares; fixes the schema of ``output``.",
    )
    status = models.CharField(max_length=10, choices=PredictionStatus.choices, default=PredictionStatus.OK)
    output = models.JSONField(
        default=dict,
        blank=True,
        help_text="The detector's output, valid for its kind (empty when status is failed), e.g. "
        "{'label': 'filtered', 'reason': 'no_face', 'scores': {...}}.",
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
                condition=Q(status="ok") | ~Q(error=""), name="prediction_failure_has_error"
            ),
        ]
        indexes = [
            models.Index(fields=["detector", "status"], name="detectors_p_detecto_status_idx"),
            # The runs of a study and each run's newest predictions, without reading the others
            # (``reports.selectors.detector_runs_in_scope``).
            models.Index(fields=["detector", "version", "id"], name="prediction_run_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.detector}@{self.version} {self.image_id}: {self.verdict or self.status}"

    @property
    def verdict(self) -> str:
        """The gender verdict (male / female / filtered) of a gender-kind prediction, else ''."""
        return str(self.output.get("label", "")) if self.kind == KIND_GENDER else ""

    @property
    def filter_reason(self) -> str:
        return str(self.output.get("reason", "")) if self.kind == KIND_GENDER else ""

    @property
    def scores(self) -> dict:
        return dict(self.output.get("scores", {}))


class JudgeResponse(models.Model):
    """A judge server's answer to one question about one image, kept so it is never asked twice."""

    key = models.CharField(max_length=64, unique=True, help_text="sha256 of the question asked (see above).")
    image_sha256 = models.CharField(max_length=64, help_text="sha256 of the image bytes sent.")
    model = models.CharField(max_length=200, help_text="The model the server was asked for.")
    question = models.TextField(help_text="The question's text.")
    mode = models.CharField(
        max_length=20, help_text="How the answer was held to the choices: choice, json_schema or none."
    )
    content = models.TextField(blank=True, help_text="The answer's raw text.")
    probabilities = models.JSONField(
        null=True, blank=True, help_text="Choice value → probability read from the logprobs; empty without."
    )
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.model} {self.image_sha256[:8]}: {self.content[:40]}"
