"""Join links for crowd panels, the participants who came through them (each an annotator account
of that study alone, bound to the browser session), and the example images the first screen shows."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from studies.models import Item, Question, Study


class JoinLink(models.Model):
    """A secret URL that enrols panel participants into one study, up to a quota of items each."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="join_links")
    token_digest = models.CharField(
        max_length=64,
        unique=True,
        help_text="SHA-256 of the URL's token, in hex. The token itself is never stored.",
    )
    quota = models.PositiveIntegerField(
        help_text="Items each participant labels before seeing the completion code (gold included)."
    )
    completion_url = models.URLField(
        max_length=1000,
        help_text="Where a participant is sent after the quota, e.g. the panel's completion page.",
    )
    completion_code = models.CharField(
        max_length=200, help_text="The code shown to a participant who finished."
    )
    panel_params = models.CharField(
        max_length=500,
        default="PROLIFIC_PID",
        blank=True,
        help_text="Query parameters that carry the panel's participant id, comma-separated, the first "
        "present wins (e.g. PROLIFIC_PID, workerId); empty: the browser session alone identifies them.",
    )
    max_participants = models.PositiveIntegerField(
        null=True, blank=True, help_text="Participants the link takes at most; empty: no cap."
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this moment the link takes no one."
    )
    closed_at = models.DateTimeField(null=True, blank=True, help_text="When a researcher closed the link.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who made the link (empty: a command).",
    )
    created_at = models.DateTimeField(default=timezone.now, help_text="When the link was made.")

    class Meta:
        verbose_name = "join link"
        ordering = ["-created_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(quota__gte=1), name="join_link_quota_at_least_one")]

    def __str__(self) -> str:
        return f"Join link {self.pk} of {self.study}"

    @property
    def param_names(self) -> list[str]:
        return [name.strip() for name in self.panel_params.split(",") if name.strip()]

    def refusal(self, now: datetime | None = None) -> str:
        """Why the link takes no one now ("" when it is open)."""
        now = now or timezone.now()
        if self.closed_at is not None:
            return "This study link has been closed by the researchers; it takes no more participants."
        if self.expires_at is not None and self.expires_at <= now:
            return "This study link has expired; it takes no more participants."
        return ""


class Participant(models.Model):
    """A panel participant: an account created by a join link that may label its study alone."""

    link = models.ForeignKey(JoinLink, on_delete=models.CASCADE, related_name="participants", db_index=False)
    study = models.ForeignKey(
        Study,
        on_delete=models.CASCADE,
        related_name="participants",
        db_index=False,
        help_text="The link's study (kept here so one panel id is one account per study).",
    )
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="crowd_participant",
        help_text="The account created on the first visit (no password; bound to the browser session).",
    )
    panel_id = models.CharField(
        max_length=200,
        help_text="The panel's participant id from the link's query parameter (e.g. PROLIFIC_PID).",
    )
    started_at = models.DateTimeField(default=timezone.now, help_text="First visit through the link.")
    consented_at = models.DateTimeField(
        null=True, blank=True, help_text="When they read the guidelines and agreed."
    )
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="When they reached the quota and were shown the completion code."
    )

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["study", "panel_id"], name="participant_one_per_panel_id_in_study"
            )
        ]
        indexes = [models.Index(fields=["link", "started_at"])]

    def __str__(self) -> str:
        return f"{self.panel_id} in {self.study_id}"


class GuidelineExample(models.Model):
    """An item a researcher picked to show on a join link's first screen as the example of one
    answer of a question."""

    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="+", db_index=False)
    value = models.CharField(
        max_length=50, help_text="The answer (a choice value of the question) it illustrates."
    )
    item = models.ForeignKey(Item, on_delete=models.CASCADE, related_name="+", help_text="The example item.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["question", "value"], name="guideline_example_one_per_answer")
        ]

    def __str__(self) -> str:
        return f"{self.question_id}={self.value}: item {self.item_id}"
