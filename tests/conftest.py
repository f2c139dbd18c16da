"""Personas and shared fixtures. Every test gets its own MEDIA_ROOT."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from detectors.safe_load import pillow_open_restore
from studies import permissions
from tests.factories import PASSWORD, StudyFactory, UserFactory

# What lets a test reach the database (pytest-django blocks it for every other test): the marker,
# or one of these fixtures among those it requests directly or through other fixtures.
_DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server"}
)


def _uses_database(item: pytest.Item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(
        _DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `bin/test --database-only` (CI's second database): a test that cannot reach the database
    # gives the same result on every database, and the first run already ran it.
    if os.environ.get("BIASLAB_TESTS_DATABASE_ONLY") == "1":
        kept: list[pytest.Item] = []
        left: list[pytest.Item] = []
        for item in items:
            (kept if _uses_database(item) else left).append(item)
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    # A test that asks for pytest-django's live_server is of that slow kind whether or not its
    # author remembered the marker, so `bin/test --fast` can never pick one up by mistake.
    # GPU tests are skipped, saying why, where torch sees no CUDA device (CI never has one).
    gpu_missing: str | None = None
    if any(item.get_closest_marker("gpu") for item in items):
        gpu_missing = _cuda_missing()
    for item in items:
        if "live_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.live_server)
        # Under xdist (`--dist loadgroup`) one worker runs all of a group: one local Ray
        # cluster for the session instead of one per worker on a 2-core machine, and the
        # PostgreSQL tests whose threads race each other never compete with another worker's.
        for group in ("ray", "postgres"):
            if item.get_closest_marker(group):
                item.add_marker(pytest.mark.xdist_group(group))
                break
        if gpu_missing and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=gpu_missing))


def _cuda_missing() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (GPU tests run on a GPU machine: pytest -m gpu)"
    return None


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs ~0.3 s per login; tests log in hundreds of times.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _empty_cache():
    # The cache outlives a test (local memory, per process): API rate-limit counts and cached
    # reports of one test must not reach the next. Tests of the limits set their own rates.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _pillow_unpatched():
    # Tests that import ultralytics themselves (tiny YOLO models) leave its PIL.Image.open
    # wrapper in the process; later tests must see Pillow's own errors (detectors.safe_load).
    yield
    pillow_open_restore()


@pytest.fixture(autouse=True)
def _media_root(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.MEDIA_ROOT.mkdir()
    return settings.MEDIA_ROOT


@pytest.fixture
def annotator_a(db):
    return UserFactory(username="anna", role=permissions.ANNOTATOR)


@pytest.fixture
def annotator_b(db):
    return UserFactory(username="ben", role=permissions.ANNOTATOR)


@pytest.fixture
def annotator_c(db):
    return UserFactory(username="cleo", role=permissions.ANNOTATOR)


@pytest.fixture
def researcher(db):
    return UserFactory(username="rita", role=permissions.RESEARCHER)


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


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One local Ray for the whole test session (starting one takes seconds): 2 CPUs and 2
    *declared* GPUs, so ``num_gpus=1`` scheduling and per-worker CUDA_VISIBLE_DEVICES are
    exercised on a machine without any. Skips, saying why, where Ray is not installed."""
    from detectors.executors import RAY_INSTALL

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        pytest.skip(f"Ray is not installed (an optional dependency; CI installs it with `{RAY_INSTALL}`)")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture
def api_for():
    """api_for(user) -> an APIClient logged in as ``user`` that sends JSON; api_for(None) is
    anonymous."""

    def make(user: Any = None) -> APIClient:
        client = APIClient()
        client.default_format = "json"
        if user is not None:
            assert client.login(username=user.username, password=PASSWORD)
        return client

    return make
