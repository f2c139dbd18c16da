"""Writes of join links: make and close a link, pick guideline examples, enrol, consent, finish.

Each is one transaction raising ``CrowdError`` for the person who caused it, writing nothing then.
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.selectors import key_digest
from annotate.models import Assignment
from crowd.errors import CrowdError, LinkRefused
from crowd.models import GuidelineExample, JoinLink, Participant
from studies.models import Item, Study
from studies.selectors import study_questions
from studies.typing import UserLike

#: Query parameter names a link may read a participant id from (PROLIFIC_PID, workerId, …).
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
DEFAULT_PANEL_PARAMS = ("PROLIFIC_PID",)
MAX_PANEL_ID = 200


def join_link_create(
    *,
    study: Study,
    quota: int,
    completion_url: str,
    completion_code: str,
    panel_params: Sequence[str] = DEFAULT_PANEL_PARAMS,
    max_participants: int | None = None,
    expires_at: datetime | None = None,
    created_by: UserLike | None = None,
) -> tuple[JoinLink, str]:
    """A new link of ``study`` and its secret token (256 bits; shown once, only its hash kept)."""
    if quota < 1:
        raise CrowdError(f"quota must be at least 1 item per participant (got {quota}).")
    try:
        URLValidator(schemes=["http", "https"])(completion_url)
    except ValidationError:
        raise CrowdError(
            f"completion URL {completion_url!r} is not an http(s) URL (e.g. https://app.prolific.com/submissions/complete?cc=CODE)."
        ) from None
    if not completion_code.strip():
        raise CrowdError("completion code must not be empty.")
    names = [name.strip() for name in panel_params if name.strip()]
    for name in names:
        if not PARAM_NAME.match(name):
            raise CrowdError(
                f"panel id parameter {name!r} is not a query parameter name (e.g. PROLIFIC_PID)."
            )
    if max_participants is not None and max_participants < 1:
        raise CrowdError(
            f"max participants must be at least 1 (got {max_participants}); leave it out for no cap."
        )
    if expires_at is not None and expires_at <= timezone.now():
        raise CrowdError(f"expiry {expires_at:%Y-%m-%d %H:%M} is in the past.")
    token = secrets.token_urlsafe(32)
    link = JoinLink.objects.create(
        study=study,
        token_digest=key_digest(token),
        quota=quota,
        completion_url=completion_url,
        completion_code=completion_code.strip(),
        panel_params=",".join(names),
        max_participants=max_participants,
        expires_at=expires_at,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    return link, token


def join_link_close(*, link: JoinLink) -> JoinLink:
    """Close the link: it takes no one from now on (a participant already in keeps their labels)."""
    if link.closed_at is None:
        link.closed_at = timezone.now()
        link.save(update_fields=["closed_at"])
    return link


@transaction.atomic
def guideline_examples_set(
    *, study: Study, examples: Sequence[tuple[str, str, str]]
) -> list[GuidelineExample]:
    """Set the example item of each (question key or "", answer value, item key); an empty
    question key means the study's only question."""
    questions = {question.key: question for question in study_questions(study)}
    stored: list[GuidelineExample] = []
    for question_key, value, item_key in examples:
        if not question_key:
            if len(questions) != 1:
                raise CrowdError(
                    f"example {value}={item_key}: the study asks several questions; write QUESTION:{value}={item_key} "
                    f"(questions: {', '.join(questions)})."
                )
            question_key = next(iter(questions))
        question = questions.get(question_key)
        if question is None:
            raise CrowdError(
                f"example: the study has no question {question_key!r} (questions: {', '.join(questions)})."
            )
        if value not in question.values:
            raise CrowdError(
                f"example: {value!r} is not an answer of {question.key} (answers: {', '.join(question.values)})."
            )
        item = Item.objects.filter(study=study, key=item_key).first()
        if item is None:
            raise CrowdError(f"example {question.key}:{value}: the study has no item {item_key!r}.")
        example, _ = GuidelineExample.objects.update_or_create(
            question=question, value=value, defaults={"item": item}
        )
        stored.append(example)
    return stored


def participant_join(*, link: JoinLink, panel_id: str) -> tuple[Participant, bool]:
    """The participant of ``link``'s study with ``panel_id`` — the one there is (they continue),
    or a new annotator account of that study alone; True when created. Refused (LinkRefused)
    when the link is closed, expired or full."""
    refusal = link.refusal()
    if refusal:
        raise LinkRefused(refusal)
    panel_id = panel_id[:MAX_PANEL_ID]
    existing = (
        Participant.objects.filter(study_id=link.study_id, panel_id=panel_id).select_related("user").first()
    )
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            # The link's row lock orders concurrent first visits, so the cap is never passed.
            JoinLink.objects.select_for_update().filter(pk=link.pk).first()
            if link.max_participants is not None and link.participants.count() >= link.max_participants:
                raise LinkRefused("This study is full: it takes no more participants.")
            user = get_user_model().objects.create_user(
                username=f"crowd-{uuid.uuid4().hex[:16]}", password=None
            )
            participant = Participant.objects.create(
                link=link, study_id=link.study_id, user=user, panel_id=panel_id
            )
            link.study.annotators.add(user)
    except IntegrityError:
        # The same id's first visit in another tab won the race: continue as that participant.
        return Participant.objects.select_related("user").get(
            study_id=link.study_id, panel_id=panel_id
        ), False
    return participant, True


def anonymous_panel_id() -> str:
    """The id of a participant of a link that reads no panel id: the browser session is all."""
    return f"session-{secrets.token_hex(8)}"


def participant_consent(*, participant: Participant) -> Participant:
    """Record that the participant read the guidelines and agreed."""
    if participant.consented_at is None:
        participant.consented_at = timezone.now()
        participant.save(update_fields=["consented_at"])
    return participant


@transaction.atomic
def participant_finish(*, participant: Participant) -> Participant:
    """The participant reached the quota: stamp it, and free the seats they still hold open so
    others label those items at once."""
    if participant.finished_at is None:
        participant.finished_at = timezone.now()
        participant.save(update_fields=["finished_at"])
    Assignment.objects.filter(
        annotator_id=participant.user_id, item__study_id=participant.study_id, completed_at__isnull=True
    ).delete()
    return participant
