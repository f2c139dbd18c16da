"""Tables of the human side of a study: images, who may label them, their labels, final labels.

Human labels (``Label``) and model output (``detectors.Prediction``) live in separate tables.
Labels and final labels keep their history in revision tables written by the services.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q


def default_label_set() -> list[dict[str, Any]]:
    """The label set of the gender study (Lyu et al. 2025, section 3.3)."""
    return [
        {"value": "male", "name": "Male", "key": "m", "clear": True},
        {"value": "female", "name": "Female", "key": "f", "clear": True},
        {"value": "low_quality", "name": "Low quality", "key": "l"},
        {"value": "other", "name": "Other", "key": "o", "requires_reason": True},
    ]


class Study(models.Model):
    """A labeling study: a set of images, a label set, and how labeling works."""

    name = models.CharField(max_length=200, unique=True, help_text="Name shown to researchers.")
    slug = models.SlugField(max_length=200, unique=True, help_text="Short name used in URLs and commands.")
    description = models.TextField(blank=True, help_text="Guidelines shown to annotators.")
    label_set = models.JSONField(
        default=default_label_set,
        help_text=(
            "Labels annotators choose from: a list of {value, name, key, requires_reason?, clear?}. "
            "'clear' marks the labels that count as a clear image in bias scores."
        ),
    )
    labels_per_image = models.PositiveSmallIntegerField(
        default=2, help_text="How many distinct annotators label each image (N)."
    )
    show_prompt = models.BooleanField(
        default=False, help_text="Show the generation prompt to annotators (off: it could prime them)."
    )
    claim_timeout_seconds = models.PositiveIntegerField(
        default=15 * 60,
        help_text="Seconds an opened but unlabelled image stays reserved before returning to the pool.",
    )
    unresolvable_label = models.CharField(
        max_length=50,
        default="low_quality",
        help_text="Final label for a dispute the annotators cannot agree on (the paper: low quality).",
    )
    annotators = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="annotated_studies",
        help_text="Users who may label this study's images.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        values = self.label_values
        if len(values) != len(set(values)) or not values:
            raise ValidationError({"label_set": "Label values must be unique and non-empty."})
        if self.unresolvable_label not in values:
            raise ValidationError({"unresolvable_label": "Must be one of the study's label values."})
        if self.labels_per_image < 1:
            raise ValidationError({"labels_per_image": "At least one label per image."})

    @property
    def label_values(self) -> list[str]:
        return [item["value"] for item in self.label_set]

    @property
    def clear_label_values(self) -> list[str]:
        return [item["value"] for item in self.label_set if item.get("clear")]

    def label_spec(self, value: str) -> dict[str, Any] | None:
        return next((item for item in self.label_set if item["value"] == value), None)


class Prompt(models.Model):
    """A text prompt given to T2I models, with the category and word it was built from."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="prompts")
    category = models.CharField(max_length=100, help_text="Prompt category, e.g. profession, trait.")
    word = models.CharField(max_length=200, help_text="The word filled into the template, e.g. lawyer.")
    text = models.TextField(help_text="The full prompt given to the T2I model.")

    class Meta:
        ordering = ["category", "word"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "category", "word", "text"], name="prompt_unique_in_study"
            )
        ]
        indexes = [models.Index(fields=["study", "category"])]

    def __str__(self) -> str:
        return self.text


class Image(models.Model):
    """One generated image of a study. The file is stored under its content hash."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="images")
    prompt = models.ForeignKey(Prompt, on_delete=models.PROTECT, related_name="images")
    t2i_model = models.CharField(
        max_length=200, db_index=True, help_text="T2I model name as imported, e.g. sdxl."
    )
    source_path = models.CharField(
        max_length=1000, help_text="Path given at import (manifest 'image' column); the key used by exports."
    )
    sha256 = models.CharField(max_length=64, help_text="SHA-256 of the file's bytes; duplicates are refused.")
    file = models.CharField(
        max_length=300, help_text="Storage name under MEDIA_ROOT, e.g. images/ab/abcd….png."
    )
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    format = models.CharField(max_length=10, help_text="Pillow format name, e.g. PNG.")
    seed = models.BigIntegerField(null=True, blank=True, help_text="Generation seed, if known.")
    index = models.PositiveIntegerField(
        null=True, blank=True, help_text="Index of the image within its prompt."
    )
    params = models.JSONField(
        default=dict, blank=True, help_text="Generation settings (steps, guidance, size…)."
    )
    completed_seats = models.PositiveSmallIntegerField(
        default=0,
        help_text=(
            "How many annotators have labelled this image (its completed seats). Recounted by "
            "annotate.services on every label, so handing out work can skip finished images "
            "through an index instead of counting the seats of every image."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["study", "source_path"], name="image_path_unique_in_study"),
            models.UniqueConstraint(fields=["study", "sha256"], name="image_hash_unique_in_study"),
        ]
        indexes = [
            models.Index(fields=["study", "t2i_model"]),
            # Handing out work walks a study's images in id order skipping finished ones: with
            # completed_seats in the key this is an index-only scan, never a heap read per image.
            models.Index(fields=["study", "id", "completed_seats"], name="image_open_work_idx"),
        ]

    def __str__(self) -> str:
        return self.source_path

    @property
    def url(self) -> str:
        return settings.MEDIA_URL + self.file


class ImageState(models.TextChoices):
    """Where an image stands in labeling; derived by selectors, never stored."""

    UNLABELLED = "unlabelled", "Unlabelled"
    IN_PROGRESS = "in_progress", "In progress"
    AGREED = "agreed", "Agreed"
    DISPUTED = "disputed", "Disputed"
    RESOLVED = "resolved", "Resolved"


class Assignment(models.Model):
    """A seat to label one image. An image has at most N seats (``slot`` 0..N-1), which the
    unique constraints turn into a database guarantee: two annotators asking at the same moment
    cannot push an image past N labels, on SQLite or PostgreSQL alike."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    slot = models.PositiveSmallIntegerField(help_text="Seat number 0..N-1 of this image.")
    claimed_at = models.DateTimeField(help_text="When the image was handed to the annotator.")
    expires_at = models.DateTimeField(help_text="An unlabelled seat is free again after this moment.")
    completed_at = models.DateTimeField(null=True, blank=True, help_text="When the label was saved.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["image", "slot"], name="assignment_one_per_slot"),
            models.UniqueConstraint(fields=["image", "annotator"], name="assignment_one_per_annotator"),
        ]
        indexes = [
            models.Index(fields=["annotator", "completed_at"]),
            # The few seats handed out but not labelled yet: progress counters and expiry look
            # them up without scanning every completed seat.
            models.Index(
                fields=["image", "expires_at"],
                condition=Q(completed_at__isnull=True),
                name="assignment_open_seat_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.image_id} seat {self.slot} → {self.annotator_id}"


class Label(models.Model):
    """One annotator's current label for one image. Changes are kept in ``LabelRevision``."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="labels")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="labels")
    value = models.CharField(max_length=50, help_text="One of the study's label values.")
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
        constraints = [models.UniqueConstraint(fields=["image", "annotator"], name="label_one_per_annotator")]
        indexes = [models.Index(fields=["annotator", "created_at"])]

    def __str__(self) -> str:
        return f"{self.image_id}: {self.value} by {self.annotator_id}"


class LabelRevision(models.Model):
    """Every value a label has had, appended by the service that wrote it."""

    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="revisions")
    value = models.CharField(max_length=50)
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
    """The ground-truth label of an image. Changes are kept in ``FinalLabelRevision``."""

    image = models.OneToOneField(Image, on_delete=models.CASCADE, related_name="final_label")
    value = models.CharField(max_length=50, help_text="One of the study's label values.")
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

    class Meta:
        indexes = [models.Index(fields=["value"])]

    def __str__(self) -> str:
        return f"{self.image_id}: {self.value} ({self.source})"


class FinalLabelRevision(models.Model):
    """Every decision on an image's final label, including removals (``value`` empty)."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="final_label_revisions")
    value = models.CharField(max_length=50, blank=True)
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
        return f"{self.image_id}: {self.value or '(removed)'} at {self.decided_at:%Y-%m-%d %H:%M}"
