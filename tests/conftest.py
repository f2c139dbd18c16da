"""Personas and shared fixtures. Every test gets its own MEDIA_ROOT."""

from __future__ import annotations

import pytest
from django.test import Client

from annotate import roles
from tests.factories import PASSWORD, StudyFactory, UserFactory


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs ~0.3 s per login; tests log in hundreds of times.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _media_root(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.MEDIA_ROOT.mkdir()
    return settings.MEDIA_ROOT


@pytest.fixture
def annotator_a(db):
    return UserFactory(username="anna", role=roles.ANNOTATOR)


@pytest.fixture
def annotator_b(db):
    return UserFactory(username="ben", role=roles.ANNOTATOR)


@pytest.fixture
def annotator_c(db):
    return UserFactory(username="cleo", role=roles.ANNOTATOR)


@pytest.fixture
def researcher(db):
    return UserFactory(username="rita", role=roles.RESEARCHER)


@pytest.fixture
def admin_user(db):
    return UserFactory(username="adam", role="admin")


@pytest.fixture
def outsider(db):
    """Logged in, but in no role and no study."""
    return UserFactory(username="oscar")


@pytest.fixture
def study(db, annotator_a, annotator_b):
    """The gender study with annotators A and B on it."""
    s = StudyFactory(name="Gender study", slug="gender")
    s.annotators.add(annotator_a, annotator_b)
    return s


def _client_for(user) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def client_for():
    """client_for(user) -> a Django test client logged in as that user."""
    return _client_for
