"""Tables of the human side: seats, labels and final labels per (item, question), revisions."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from studies.models import Item, Question


class ItemState(models.TextChoices):
    """Where an (item, question) stands in labeling; derived by selectors, never stored."""

    UNLABELLED = "unlabelled", "Unlabelled"
    IN_PROGRESS = "in_progress", "In progress"
    AGREED = "agreed", "Agreed"
    DISPUTED = "disputed", "Disputed"
    RESOLVED = "resolved", "Resolved"


class Assignment(models.Model):
    """A seat to label one item; at most N per item (``slot`` 0..N-1), by unique constraints."""

    # No index of their own (db_index=False): a constraint or Meta index leads with the column.
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="assignments", db_index=False)
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments", db_index=False
    )
    slot = models.PositiveSmallIntegerField(help_text="Seat number 0..N-1 of this item.")
    claimed_at = models.DateTimeField(help_text="When the item was handed to the annotator.")
    expires_at = models.DateTimeField(help_text="An unlabelled seat is free again after this moment.")
    completed_at = models.DateTimeField(null=True, blank=True, help_text="When the labels were saved.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "slot"], name="seat_one_per_slot"),
            models.UniqueConstraint(fields=["item", "annotator"], name="seat_one_per_annotator"),
        ]
        indexes = [
            models.Index(fields=["annotator", "completed_at"]),
            # The seats handed out but not labelled yet, for progress counters and expiry.
            models.Index(
                fields=["item", "expires_at"],
                condition=Q(completed_at__isnull=True),
                name="seat_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} seat {self.slot} → {self.annotator_id}"


class Label(models.Model):
    """One annotator's current answer to one question about one item."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="labels", db_index=False)
    # RESTRICT: a question with answers cannot be deleted alone, only with its study.
    question = models.ForeignKey(Question, on_delete=models.RESTRICT, related_name="labels")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="labels", db_index=False
    )
    value = models.CharField(
        max_length=1000, help_text="One of the question's choice values (or a list, for box questions)."
    )
    reason = models.TextField(blank=True, help_text="Why, required for labels such as 'other'.")
    duration_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="Milliseconds from showing the image to the label."
    )
    request_id = models.CharField(
        max_length=64, blank=True, help_text="Client token of the submit; a retried request is stored once."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "question", "annotator"], name="label_one_per_annotator_and_question"
            )
        ]
        indexes = [models.Index(fields=["annotator", "created_at"])]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value} by {self.annotator_id}"


class LabelRevision(models.Model):
    """Every value a label has had, appended by the service that wrote it."""

    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="revisions")
    value = models.CharField(max_length=1000)
    reason = models.TextField(blank=True)
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    changed_at = models.DateTimeField(auto_now_add=True)
    request_id = models.CharField(
        max_length=64,
        blank=True,
        help_text="Client token of the submit that made this change; a late retry of it changes nothing.",
    )

    class Meta:
        ordering = ["changed_at", "id"]

    def __str__(self) -> str:
        return f"{self.label_id}: {self.value} at {self.changed_at:%Y-%m-%d %H:%M}"


class FinalLabelSource(models.TextChoices):
    AGREED = "agreed", "Annotators agreed"
    RESOLVED = "resolved", "Resolved by a researcher"
    IMPORTED = "imported", "Imported ground truth"


class FinalLabel(models.Model):
    """The ground-truth answer to one question about one item."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="final_labels", db_index=False)
    question = models.ForeignKey(
        Question, on_delete=models.RESTRICT, related_name="final_labels", db_index=False
    )
    value = models.CharField(max_length=1000, help_text="One of the question's choice values.")
    source = models.CharField(max_length=20, choices=FinalLabelSource.choices)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Researcher who resolved or imported it; empty when the annotators agreed.",
    )
    note = models.TextField(blank=True, help_text="Why the researcher chose this label.")
    decided_at = models.DateTimeField()
    posterior = models.FloatField(
        null=True,
        blank=True,
        help_text="Probability of this answer under the study's truth-inference model; empty for the "
        "agreement rules, a researcher's decision or an import.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["item", "question"], name="final_label_one_per_question")
        ]
        indexes = [models.Index(fields=["question", "value"])]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value} ({self.source})"


class FinalLabelRevision(models.Model):
    """Every decision on an (item, question)'s final label, including removals (``value`` empty)."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="final_label_revisions")
    question = models.ForeignKey(Question, on_delete=models.RESTRICT, related_name="final_label_revisions")
    value = models.CharField(max_length=1000, blank=True)
    source = models.CharField(max_length=20, choices=FinalLabelSource.choices, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    note = models.TextField(blank=True)
    decided_at = models.DateTimeField()

    class Meta:
        ordering = ["decided_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(value="") | ~Q(source=""), name="final_revision_value_has_source"
            )
        ]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value or '(removed)'} at {self.decided_at:%Y-%m-%d %H:%M}"


class GoldResponse(models.Model):
    """An annotator's answer to one question of a gold item; never a label."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="gold_responses", db_index=False)
    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="gold_responses")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gold_responses"
    )
    value = models.CharField(max_length=1000, help_text="The annotator's answer.")
    correct = models.BooleanField(help_text="Whether the answer equals the gold answer.")
    duration_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="Milliseconds from showing the image to the answer."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "question", "annotator"], name="gold_response_one_per_annotator"
            )
        ]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value} by {self.annotator_id} (gold)"
