"""A gender study of four items and a way to make its join links."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from crowd.services import join_link_create
from tests.factories import ItemFactory, PromptFactory

COMPLETION_URL = "https://app.prolific.com/submissions/complete?cc=C1234"


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study, category="profession", word="nurse")
    return [ItemFactory(prompt=prompt) for _ in range(4)]


@pytest.fixture
def make_link(study):
    """make_link(**changes) -> (link, token) of the gender study, quota 2 unless told."""

    def make(**changes):
        expires_in = changes.pop("expires_in", None)
        options = {
            "study": study,
            "quota": 2,
            "completion_url": COMPLETION_URL,
            "completion_code": "C1234",
            **changes,
        }
        if expires_in is not None:
            options["expires_at"] = timezone.now() + timedelta(seconds=expires_in)
        return join_link_create(**options)

    return make
