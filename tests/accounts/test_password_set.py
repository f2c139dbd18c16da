"""The page where a new account sets its password: only with its own link, and only once."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.selectors import password_set_path
from studies.services import annotators_add
from tests.factories import StudyFactory

pytestmark = pytest.mark.django_db


def test_a_tampered_link_sets_nothing(settings):
    (alice,) = annotators_add(study=StudyFactory(slug="team"), usernames=["alice"]).created
    path = password_set_path(alice)
    forged = path.rstrip("/").rpartition("/")[0] + "/abc-0123456789abcdef/"
    client = Client()
    page = client.get(forged, follow=True)
    assert b"does not work any more" in page.content
    client.post(forged, {"new_password1": "some-long-password-9", "new_password2": "some-long-password-9"})
    alice.refresh_from_db()
    assert not alice.has_usable_password()


def test_the_link_names_the_account_and_checks_the_password_rules():
    (alice,) = annotators_add(study=StudyFactory(slug="team"), usernames=["alice"]).created
    client = Client()
    page = client.get(password_set_path(alice), follow=True)
    assert b"<strong>alice</strong>" in page.content
    weak = client.post(page.redirect_chain[-1][0], {"new_password1": "123", "new_password2": "123"})
    assert weak.status_code == 200
    assert b"too short" in weak.content
    alice.refresh_from_db()
    assert not alice.has_usable_password()
