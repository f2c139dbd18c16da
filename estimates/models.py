"""Sampling rounds: which images people label so that a detector's scores can be corrected
into an unbiased estimate of the human-truth bias score (issue 13, ``metrics.ppi``).

A round belongs to one study and one detector *version*: its inclusion probabilities π come
from that version's verdicts (and, for the active design, from the labels of that version's
earlier rounds), so rounds of different versions are never combined. Every item of the study
gets one ``RoundItem`` row, written once by ``estimates.services.sampling_round_create`` before
the draw is applied; nothing updates them afterwards (the admin is read-only), because the
estimator is unbiased only for the π that were fixed before the draw.
"""

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
    """An item's inclusion probability in a round and whether the draw selected it.

    Written once with the round. π = 0 for items drawn in an earlier round of the same detector
    version, π = 1 for items whose final label already existed (their residual is known: taking
    them with certainty costs no label and keeps the estimate unbiased)."""

    round = models.ForeignKey(
        SamplingRound,
        on_delete=models.CASCADE,
        related_name="round_items",
        help_text="The round.",
        db_index=False,
    )
    # RESTRICT: an item in a round cannot be deleted alone (the round's π would no longer
    # describe the images that exist), but deleting the whole study still works.
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
    """The estimate last computed for a study and detector — by the estimate page or by
    ``estimate_bias`` — with the state of the data it was computed from.

    Computing an estimate reads the whole study (tens of seconds at a million images), and any
    label changes the data. The page shows this one at once, marked with when it was computed
    and that the data changed since, while it asks for the current one (``estimates.views``).
    One row per (study, detector), replaced by every computation (``estimates.services.
    estimate_keep``); the report is pickled (it is only ever read back by this code, and a row
    that no longer unpickles is treated as missing)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+", db_index=False)
    detector = models.CharField(max_length=100)
    state = models.TextField(
        help_text="What the estimate was computed from: the data fingerprint, the rounds and the options."
    )
    history = models.BooleanField(help_text="Whether the report holds the round-by-round history.")
    computed_at = models.DateTimeField()
    report = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["study", "detector"], name="kept_estimate_one_per_detector")
        ]

    def __str__(self) -> str:
        return f"estimate of {self.study_id}/{self.detector} computed {self.computed_at:%Y-%m-%d %H:%M}"
