"""The core tables: a study, its questions, the items people label and the image files, each
stored once under its content hash and linked to items by role. See docs/explanation/model.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from studies.kinds import validate_kind
from studies.protocols import protocol_choices


class AgreementRule(models.TextChoices):
    """When the labels of an (item, question) become its final answer without a researcher."""

    UNANIMOUS = "unanimous", "Unanimous: all N annotators give the same answer"
    MAJORITY = "majority", "Majority: more than half of the N annotators give the same answer"
    DAWID_SKENE = (
        "dawid_skene",
        "Dawid-Skene: the most probable answer given each annotator's confusion matrix",
    )
    GLAD = "glad", "GLAD: the most probable answer given annotator ability and item difficulty"
    MACE = "mace", "MACE: the most probable answer given how often each annotator spams"


#: Rules whose final answers a truth-inference model gives over all of the study's labels
#: (``recompute_finals``), not the labels of one item as they come in.
INFERENCE_RULES = frozenset({AgreementRule.DAWID_SKENE, AgreementRule.GLAD, AgreementRule.MACE})


class Study(models.Model):
    """A labeling study: a protocol, its questions, its items and how labeling works."""

    name = models.CharField(max_length=200, unique=True, help_text="Name shown to researchers.")
    slug = models.SlugField(max_length=200, unique=True, help_text="Short name used in URLs and commands.")
    protocol = models.CharField(
        max_length=20,
        choices=protocol_choices,
        help_text="The kind of study: which questions it asks, which detector outputs it reads, "
        "which analysis reports it.",
    )
    description = models.TextField(
        blank=True, help_text="Guidelines shown to annotators on the labeling screen."
    )
    labels_per_item = models.PositiveSmallIntegerField(
        default=2, help_text="How many distinct annotators label each item (N)."
    )
    agreement = models.CharField(
        max_length=20,
        choices=AgreementRule.choices,
        default=AgreementRule.UNANIMOUS,
        help_text="How an (item, question) gets its final answer from the labels alone; the rest "
        "goes to the dispute queue.",
    )
    show_prompt = models.BooleanField(
        default=False, help_text="Show the generation prompt to annotators (off: it could prime them)."
    )
    claim_timeout_seconds = models.PositiveIntegerField(
        default=15 * 60,
        help_text="Seconds an opened but unlabelled item stays reserved before returning to the pool.",
    )
    priority_queue = models.BooleanField(
        default=False,
        help_text="True once a sampling round has queued items (Item.queue = 2): handing out work "
        "looks at them first. Set by the sampling service and left on; after the round it costs "
        "one empty probe per claim.",
    )
    parameters = models.JSONField(
        default=dict,
        blank=True,
        help_text="Protocol settings read by its analysis, e.g. thresholds of a pair-change study.",
    )
    annotators = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="annotated_studies",
        help_text="Users who may label this study's items.",
    )
    gold_rate = models.FloatField(
        default=0.0,
        help_text="Share of the items handed to an annotator that are gold items (known answers, "
        "served like any other item); 0: none.",
    )
    min_gold_accuracy = models.FloatField(
        null=True,
        blank=True,
        help_text="Annotators whose gold accuracy is below this (after min_gold gold answers) are "
        "flagged for exclusion; empty: no rule.",
    )
    min_posterior = models.FloatField(
        default=0.9,
        help_text="With a truth-inference rule: the posterior probability an answer needs to become "
        "final; below it the (item, question) is a dispute.",
    )
    min_gold = models.PositiveSmallIntegerField(
        default=5, help_text="Gold answers an annotator needs before the gold rule can flag them."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "studies"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(labels_per_item__gte=1), name="study_at_least_one_label"),
            models.CheckConstraint(
                condition=Q(gold_rate__gte=0, gold_rate__lte=1), name="study_gold_rate_share"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Question(models.Model):
    """One question annotators answer about every item of a study (or the items that ask it);
    ``choices`` (``{"value", "name", "key", "requires_reason"?, "clear"?}``) is its vocabulary."""

    # db_index=False here and on the keys so marked: docs/explanation/model.md, "Indexes".
    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="questions", db_index=False)
    key = models.SlugField(max_length=50, help_text="Identifier used in files and URLs, e.g. gender, boots.")
    text = models.CharField(max_length=500, help_text="The question as annotators read it.")
    choices = models.JSONField(
        blank=True,
        help_text="Answers: a list of {value, name, key, requires_reason?, clear?}; none for a kind "
        "that needs none (classes).",
    )
    kind = models.CharField(
        max_length=10,
        default="choice",
        validators=[validate_kind],
        help_text="How the question is answered and how its value is written: a registered kind "
        "(studies.kinds), e.g. choice, toggle.",
    )
    hotkey = models.CharField(
        max_length=1,
        blank=True,
        help_text="Key that toggles a yes/no question when many are asked on one screen.",
    )
    default_value = models.CharField(
        max_length=50, blank=True, help_text="Answer preselected on the screen (e.g. no), if any."
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Order on the labeling screen.")
    unresolvable_value = models.CharField(
        max_length=50,
        blank=True,
        help_text="Final answer for a dispute the annotators cannot settle (the gender study: "
        "low quality); empty when the question has none.",
    )

    class Meta:
        ordering = ["study", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["study", "key"], name="question_key_unique_in_study")]

    def __str__(self) -> str:
        # What the admin's question rows are captioned with: the key and the question.
        return f"{self.key}: {self.text}"

    @property
    def values(self) -> list[str]:
        return [choice["value"] for choice in self.choices]

    @property
    def clear_values(self) -> list[str]:
        return [choice["value"] for choice in self.choices if choice.get("clear")]

    def choice(self, value: str) -> dict[str, Any] | None:
        return next((choice for choice in self.choices if choice["value"] == value), None)

    def display(self, value: str) -> str:
        choice = self.choice(value)
        return str(choice.get("name", value)) if choice else value


class Prompt(models.Model):
    """A text prompt given to T2I models, with the category and word it was built from."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="prompts", db_index=False)
    category = models.CharField(
        max_length=100, help_text="Prompt category, e.g. profession, trait, a BiasPainter domain."
    )
    word = models.CharField(max_length=200, help_text="The word filled into the template, e.g. lawyer.")
    text = models.TextField(help_text="The full prompt given to the T2I model (or the editing model).")

    class Meta:
        ordering = ["category", "word"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "category", "word", "text"], name="studies_prompt_unique_in_study"
            )
        ]

    def __str__(self) -> str:
        return self.text


class Image(models.Model):
    """One image file, stored once under its SHA-256 whatever the number of items using it."""

    sha256 = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the file's bytes.")
    file = models.CharField(
        max_length=300, help_text="Storage name under MEDIA_ROOT, e.g. images/ab/abcd….png."
    )
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    format = models.CharField(max_length=10, help_text="Pillow format name, e.g. PNG.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.file

    @property
    def url(self) -> str:
        return settings.MEDIA_URL + self.file


class Item(models.Model):
    """What annotators label and reports count: one generated image, or a seed/edit pair."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="items", db_index=False)
    key = models.CharField(
        max_length=1000,
        help_text="The item's name in files: the manifest's 'item' column, or its image path for "
        "one-image items.",
    )
    # RESTRICT, not PROTECT: deleting the study deletes its prompts and items together, while
    # deleting a prompt that items still use is refused (PROTECT refused both).
    prompt = models.ForeignKey(
        Prompt,
        on_delete=models.RESTRICT,
        null=True,
        blank=True,
        related_name="items",
        help_text="The prompt the item's image was generated or edited with; empty for seed photos.",
    )
    # Indexed only after the study (Meta.indexes): every query of it names the study.
    t2i_model = models.CharField(
        max_length=200, blank=True, help_text="T2I or editing model name, e.g. sdxl."
    )
    seed = models.BigIntegerField(null=True, blank=True, help_text="Generation seed, if known.")
    index = models.PositiveIntegerField(
        null=True, blank=True, help_text="Index of the image within its prompt."
    )
    params = models.JSONField(
        default=dict, blank=True, help_text="Generation settings (steps, guidance, size…)."
    )
    metadata = models.JSONField(
        default=dict,
        blank=True,
        help_text="Every other manifest column, read by the protocol's analysis (e.g. gender, "
        "setting, template).",
    )
    question_keys = models.JSONField(
        default=list,
        blank=True,
        help_text="Keys of the questions this item asks; empty: every question of the study.",
    )
    queue = models.PositiveSmallIntegerField(
        default=1,
        help_text="Whether and when annotators are given this item: 0 = not offered (e.g. a pair "
        "not drawn for human checking), 1 = offered, 2 = offered first (drawn in a sampling round).",
    )
    completed_seats = models.PositiveSmallIntegerField(
        default=0,
        help_text=(
            "How many annotators have labelled this item (its completed seats). Kept by "
            "annotate.services on every label, so handing out work skips finished items through "
            "an index instead of counting the seats of every item."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["study", "key"], name="item_key_unique_in_study")]
        indexes = [
            models.Index(fields=["study", "t2i_model"]),
            # Handing out work walks a study's queued items in id order skipping finished ones:
            # with queue and completed_seats in the key this is an index-only scan.
            models.Index(fields=["study", "queue", "id", "completed_seats"], name="item_queue_work_idx"),
        ]

    def __str__(self) -> str:
        return self.key


class GoldAnswer(models.Model):
    """The known answer to one question about a gold item (an attention check); answers to it are
    ``annotate.GoldResponse`` rows, never labels."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="gold_answers", db_index=False)
    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="gold_answers")
    value = models.CharField(
        max_length=1000, help_text="The right answer: one of the question's choice values."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item", "question"]
        constraints = [
            models.UniqueConstraint(fields=["item", "question"], name="gold_answer_one_per_question")
        ]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.question_id}: {self.value} (gold)"


class ImageRole(models.TextChoices):
    IMAGE = "image", "Image"
    INPUT = "input", "Input (seed photo)"
    OUTPUT = "output", "Output (edited image)"


class ItemImage(models.Model):
    """An image's role in an item, with the path it was imported under."""

    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="item_images", db_index=False)
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="item_images")
    role = models.CharField(max_length=10, choices=ImageRole.choices, default=ImageRole.IMAGE)
    source_path = models.CharField(
        max_length=1000,
        help_text="Path given at import (manifest 'image' column); the key exports use for the image.",
    )
    # Identify the file without reading it on a re-import (docs/explanation/images.md); empty when unknown.
    file_size = models.BigIntegerField(
        null=True, blank=True, help_text="Size in bytes of the file at source_path when it was imported."
    )
    file_mtime_ns = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Modification time (ns since the epoch) of the file at source_path when it was imported.",
    )

    class Meta:
        ordering = ["item", "role"]
        constraints = [
            models.UniqueConstraint(fields=["item", "role"], name="item_image_one_per_role"),
        ]
        indexes = [models.Index(fields=["source_path"])]

    def __str__(self) -> str:
        return f"{self.item_id}/{self.role}: {self.source_path}"


def set_null_in_batches(collector: Any, field: Any, sub_objs: Any, using: str) -> None:
    """``on_delete``: Django's ``SET_NULL`` cleared a batch of deleted rows at a time (Django's
    own, lazy, sends one value per deleted row in one UPDATE: a million items exceed SQLite's limit)."""
    collector.add_field_update(field, None, sub_objs)


class ItemChangeAction(models.TextChoices):
    UPDATED = "updated", "Updated by a re-import of its manifest"
    REMOVED = "removed", "Removed (remove_items)"
    RESTORED = "restored", "Restored from its removal's backup (import_images --restore)"


class ItemChange(models.Model):
    """Audit trail of corrections to items (re-import updates, removals, restores), written in the
    change's transaction and never edited; ``item_key`` names an item removed since."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="item_changes", db_index=False)
    item = models.ForeignKey(
        Item,
        on_delete=set_null_in_batches,
        null=True,
        blank=True,
        related_name="changes",
        help_text="The item changed; empty once it was removed.",
    )
    item_key = models.CharField(max_length=1000, help_text="The item's key when it was changed.")
    action = models.CharField(max_length=10, choices=ItemChangeAction.choices)
    changes = models.JSONField(
        default=dict,
        blank=True,
        help_text="What changed: {field: {old, new}}; for a removal, what went with the item.",
    )
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The account that made the change (admin upload); empty for a command.",
    )
    actor = models.CharField(
        max_length=200,
        help_text="Who made the change: the account's username, or the shell user of a command.",
    )
    source = models.CharField(
        max_length=1000, blank=True, help_text="What made it: the command and its file, or the admin upload."
    )
    changed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-changed_at", "-id"]
        indexes = [models.Index(fields=["study", "item_key"])]

    def __str__(self) -> str:
        return f"{self.item_key} {self.action} by {self.actor}"


class ImportStatus(models.TextChoices):
    DONE = "done", "done"
    DRY_RUN = "dry_run", "dry run (nothing written)"
    REJECTED = "rejected", "rows rejected"
    REFUSED = "refused", "file refused (nothing written)"


class ImportRun(models.Model):
    """One run of an importer (images, labels, ground truth, predictions), written whether it wrote
    anything or not: who, when, which file, what it counted and which rows it refused."""

    kind = models.CharField(
        max_length=40, help_text="What was imported: images, labels, ground truth, predictions."
    )
    study = models.ForeignKey(
        Study,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The study imported into; empty for a file of several studies, or once it is deleted.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The account that ran the import (admin upload, a named user); empty for a command.",
    )
    actor = models.CharField(
        max_length=200, help_text="Who ran it: the account's username, or the shell user of a command."
    )
    file = models.CharField(max_length=1000, help_text="The file imported, as given.")
    started_at = models.DateTimeField(help_text="When the run began.")
    finished_at = models.DateTimeField(auto_now_add=True, help_text="When the run ended.")
    status = models.CharField(max_length=10, choices=ImportStatus.choices)
    rows = models.PositiveIntegerField(default=0, help_text="CSV rows read.")
    counts = models.JSONField(
        default=dict, blank=True, help_text="What the run did: accepted, duplicates, skipped, changed …"
    )
    rejected = models.PositiveIntegerField(default=0, help_text="How many rows were refused.")
    rejected_rows = models.JSONField(
        default=list, blank=True, help_text="The first refused rows: [row number, path, reason]."
    )
    error = models.TextField(blank=True, help_text="Why the whole file was refused, if it was.")

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.kind} import of {self.file} ({self.status})"
