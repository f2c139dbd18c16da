"""Sampling rounds (π fixed before the draw and never changed), kept estimates and their jobs."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from studies.models import Item, Study


class Design(models.TextChoices):
    UNIFORM = "uniform", "Uniform: every unlabelled image has the same probability"
    ACTIVE = "active", "Active: more probability where the detector is least certain"
    STRATIFIED = "stratified", "Stratified: prompt x detector output, Neyman allocation of the budget"


class SamplingRound(models.Model):
    """One draw of images for people to label, for one detector version of one study."""

    # No index of its own here and on the keys below so marked: a unique constraint leads with it.
    study = models.ForeignKey(
        Study,
        on_delete=models.CASCADE,
        related_name="sampling_rounds",
        help_text="The study sampled.",
        db_index=False,
    )
    number = models.PositiveIntegerField(
        help_text="1, 2, … in the order rounds were created within the study (all detectors)."
    )
    detector = models.CharField(
        max_length=100, help_text="Registry key of the detector whose verdicts the estimate corrects."
    )
    detector_version = models.CharField(
        max_length=200,
        help_text="The detector version whose predictions set π; a new version starts a new series of rounds.",
    )
    design = models.CharField(
        max_length=10,
        choices=Design.choices,
        help_text="How the inclusion probabilities were chosen.",
    )
    seed = models.BigIntegerField(
        help_text="Seed of the Bernoulli draw: the same π and seed give the same draw."
    )
    budget = models.PositiveIntegerField(
        help_text="Labels asked for: the sum of π over the images not labelled yet (the expected number drawn)."
    )
    n_selected = models.PositiveIntegerField(
        help_text="Images the draw selected, including images whose final label already existed (π = 1)."
    )
    n_already_labelled = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Of the selected images, those whose final label already existed when the round was "
        "drawn (taken with π = 1, not drawn): n_selected minus these were drawn for labelling. Empty for "
        "rounds drawn before this was recorded.",
    )
    created_at = models.DateTimeField(auto_now_add=True, help_text="When the round was drawn.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who asked for the round; empty when it was drawn from the command line.",
    )

    class Meta:
        ordering = ["study", "number"]
        constraints = [
            models.UniqueConstraint(fields=["study", "number"], name="sampling_round_number_unique"),
            models.CheckConstraint(condition=Q(budget__gte=1), name="sampling_round_budget_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.study_id} round {self.number} ({self.detector}@{self.detector_version}, {self.design})"

    @property
    def n_drawn(self) -> int | None:
        """Images the draw sent to labelling (selected, not labelled before); None when unknown."""
        if self.n_already_labelled is None:
            return None
        return self.n_selected - self.n_already_labelled


class RoundItem(models.Model):
    """An item's inclusion probability in a round (0: drawn earlier, 1: already labelled), and if drawn."""

    round = models.ForeignKey(
        SamplingRound,
        on_delete=models.CASCADE,
        related_name="round_items",
        help_text="The round.",
        db_index=False,
    )
    # RESTRICT: a round's item cannot be deleted alone (its π would no longer describe the images).
    item = models.ForeignKey(
        Item, on_delete=models.RESTRICT, related_name="round_items", help_text="The image (item) sampled."
    )
    pi = models.FloatField(help_text="Inclusion probability π, fixed before the draw (0 to 1).")
    selected = models.BooleanField(help_text="Whether the Bernoulli draw selected the item in this round.")

    class Meta:
        ordering = ["round", "item"]
        constraints = [
            models.UniqueConstraint(fields=["round", "item"], name="round_item_unique"),
            models.CheckConstraint(condition=Q(pi__gte=0) & Q(pi__lte=1), name="round_item_pi_in_unit"),
            models.CheckConstraint(
                condition=Q(selected=False) | Q(pi__gt=0), name="round_item_selected_has_pi"
            ),
        ]

    def __str__(self) -> str:
        return f"round {self.round_id} item {self.item_id}: π={self.pi:.4f}{' selected' if self.selected else ''}"


class KeptEstimate(models.Model):
    """The estimate last computed for a study, detector and options, with the data state it came from."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+", db_index=False)
    detector = models.CharField(max_length=100, help_text="Registry key of the detector estimated from.")
    options = models.CharField(
        max_length=100,
        help_text="The computation's options: bootstrap replicates, seed and whether the round-by-round "
        "history is in it (``estimates.selectors.estimate_options``).",
    )
    state = models.TextField(
        help_text="What the estimate was computed from: the study's own data version, its rounds and the options."
    )
    history = models.BooleanField(help_text="Whether the report holds the round-by-round history.")
    computed_at = models.DateTimeField(help_text="When the computation finished.")
    seconds = models.FloatField(null=True, blank=True, help_text="How long the computation took.")
    report = models.JSONField(
        help_text="The report as JSON: the API's body, the page's table, chart, warnings and pending rounds."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["study", "detector", "options"], name="kept_estimate_one_per_options"
            )
        ]

    def __str__(self) -> str:
        return f"estimate of {self.study_id}/{self.detector} computed {self.computed_at:%Y-%m-%d %H:%M}"


class JobStatus(models.TextChoices):
    QUEUED = "queued", "Queued: waits for the estimate worker"
    RUNNING = "running", "Running: the worker computes it"
    DONE = "done", "Done: the result is the kept estimate"
    FAILED = "failed", "Failed: the error says why"


class EstimateJob(models.Model):
    """One computation of an estimate by the worker: one row per (study, detector, state)."""

    MAX_ATTEMPTS = 3

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+", db_index=False)
    detector = models.CharField(max_length=100, help_text="Registry key of the detector estimated from.")
    options = models.CharField(max_length=100, help_text="Bootstrap replicates, seed and history, as text.")
    n_boot = models.PositiveIntegerField(help_text="Design-bootstrap replicates.")
    seed = models.BigIntegerField(help_text="Seed of the bootstrap.")
    history = models.BooleanField(
        help_text="Whether the round-by-round history (the page's chart) is computed."
    )
    state = models.TextField(help_text="The study's data version, its rounds and the options, as text.")
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker started it.")
    error = models.TextField(blank=True, help_text="Why it failed (empty unless failed).")
    created_at = models.DateTimeField(auto_now_add=True, help_text="When it was first asked for.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When a worker last started it.")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="When its worker last said it is still computing."
    )
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When it finished or failed.")
    spawned_at = models.DateTimeField(
        null=True, blank=True, help_text="When a web process last started a worker for it."
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["study", "detector", "state"], name="estimate_job_one_per_state"),
            models.UniqueConstraint(
                fields=["study"],
                condition=Q(status="running"),
                name="estimate_job_one_running_per_study",
            ),
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="estimate_job_status_idx")]

    def __str__(self) -> str:
        return f"estimate job {self.pk} of {self.study_id}/{self.detector}: {self.status}"
