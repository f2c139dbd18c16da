"""Annotator exclusion, reversibly: the labels (with their history) of an excluded annotator move
to ``ExcludedLabel`` and back on re-inclusion (``quality.services``); and the reliability a
truth-inference model inferred."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from studies.models import Item, Question, Study


class AnnotatorExclusion(models.Model):
    """One exclusion of an annotator from a study, and its re-inclusion once made."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="exclusions", db_index=False)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.TextField(blank=True, help_text="Why the annotator was excluded.")
    excluded_by = models.CharField(max_length=200, help_text="Who excluded them (username or shell user).")
    excluded_at = models.DateTimeField(auto_now_add=True)
    labels_moved = models.PositiveIntegerField(default=0, help_text="Labels taken out of the study.")
    finals_changed = models.PositiveIntegerField(
        default=0, help_text="Agreed final labels removed or changed by the exclusion."
    )
    included_by = models.CharField(max_length=200, blank=True, help_text="Who re-included them.")
    included_at = models.DateTimeField(null=True, blank=True, help_text="When; empty while excluded.")
    labels_returned = models.PositiveIntegerField(
        default=0, help_text="Labels put back on re-inclusion (the rest: others took the seat meanwhile)."
    )

    class Meta:
        ordering = ["-excluded_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "annotator"],
                condition=Q(included_at__isnull=True),
                name="exclusion_one_active_per_annotator",
            )
        ]

    def __str__(self) -> str:
        return f"{self.annotator_id} excluded from {self.study_id}"


class ExcludedLabel(models.Model):
    """A label of an excluded annotator, kept out of the study until re-inclusion."""

    exclusion = models.ForeignKey(AnnotatorExclusion, on_delete=models.CASCADE, related_name="labels")
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="+")
    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="+")
    value = models.CharField(max_length=1000)
    reason = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    labelled_at = models.DateTimeField(help_text="When the label was first given.")
    completed_at = models.DateTimeField(null=True, blank=True, help_text="When its seat was completed.")
    revisions = models.JSONField(
        default=list, help_text="The label's history: [{value, reason, changed_by, changed_at, request_id}]."
    )

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value} (excluded)"


class InferredReliability(models.Model):
    """What the study's truth-inference model made of one annotator at its last run
    (``recompute_finals``): the mean posterior of their answers and their expected confusion
    matrix per question. Replaced by every run; none for the agreement rules."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="+", db_index=False)
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    method = models.CharField(max_length=20, help_text="The rule that ran: dawid_skene, glad or mace.")
    reliability = models.FloatField(help_text="Mean posterior probability of the annotator's answers (0..1).")
    confusion = models.JSONField(
        default=dict,
        help_text="Per question key: {answers: [...], counts: [[expected count, true row x their column]]}.",
    )
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["study", "annotator"], name="inferred_reliability_one_per_annotator"
            )
        ]

    def __str__(self) -> str:
        return f"{self.annotator_id} in {self.study_id}: {self.reliability:.2f} ({self.method})"
