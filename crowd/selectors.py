"""Reads of join links: a link by its token, a participant's progress, the participants table,
the guideline examples of a study."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from accounts.selectors import key_digest
from annotate.models import Assignment
from crowd.models import GuidelineExample, JoinLink, Participant
from studies.models import Study
from studies.selectors import images_load, item_main_image, study_questions


def link_by_token(token: str) -> JoinLink | None:
    """The link whose token this is, with its study; None for any other string."""
    if not token or len(token) > 100:
        return None
    return JoinLink.objects.select_related("study").filter(token_digest=key_digest(token)).first()


def links_of(*, study: Study) -> QuerySet[JoinLink]:
    """The study's links, newest first, each with ``n_participants`` and ``n_finished``."""
    return JoinLink.objects.filter(study=study).annotate(
        n_participants=Count("participants"),
        n_finished=Count("participants", filter=Q(participants__finished_at__isnull=False)),
    )


def items_done(*, user_id: int, study_id: int) -> int:
    """Items the account has labelled in the study (its completed seats)."""
    return Assignment.objects.filter(
        annotator_id=user_id, item__study_id=study_id, completed_at__isnull=False
    ).count()


@dataclass(frozen=True)
class ParticipantRow:
    """One participant for researchers: ``seconds`` runs from the first visit to the finish (or,
    before it, to their latest label); None before any label."""

    panel_id: str
    username: str
    link: int
    started_at: datetime
    consented_at: datetime | None
    finished_at: datetime | None
    items: int
    seconds: float | None


def participant_rows(*, study: Study) -> list[ParticipantRow]:
    """Every participant of the study's links, in order of arrival."""
    done = Q(user__assignments__completed_at__isnull=False, user__assignments__item__study=study)
    participants = (
        Participant.objects.filter(study=study)
        .select_related("user")
        .annotate(
            n_items=Count("user__assignments", filter=done),
            last_label=Max("user__assignments__completed_at", filter=done),
        )
        .order_by("started_at", "id")
    )
    rows = []
    for participant in participants:
        end = participant.finished_at or participant.last_label
        rows.append(
            ParticipantRow(
                panel_id=participant.panel_id,
                username=participant.user.username,
                link=participant.link_id,
                started_at=participant.started_at,
                consented_at=participant.consented_at,
                finished_at=participant.finished_at,
                items=participant.n_items,
                seconds=None if end is None else round((end - participant.started_at).total_seconds(), 1),
            )
        )
    return rows


def guideline_examples(*, study: Study) -> list[dict[str, Any]]:
    """Per question of the study, its answers in order, each with the example image picked for
    it (``image_url`` None where none was)."""
    questions = study_questions(study)
    examples = list(GuidelineExample.objects.filter(question__in=questions).select_related("item"))
    images_load([example.item for example in examples])
    by_answer = {(example.question_id, example.value): example.item for example in examples}
    rows = []
    for question in questions:
        answers = []
        for choice in question.choices:
            item = by_answer.get((question.pk, choice["value"]))
            image = item_main_image(item) if item is not None else None
            answers.append(
                {
                    "value": choice["value"],
                    "name": choice.get("name", choice["value"]),
                    "key": choice.get("key", ""),
                    "image_url": image.image.url if image is not None else None,
                }
            )
        rows.append({"key": question.key, "text": question.text, "answers": answers})
    return rows
