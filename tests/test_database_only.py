"""``bin/test --database-only`` (CI's PostgreSQL run) keeps exactly the tests that can reach the
database: ``tests/conftest.py``'s ``_uses_database``, asked about these tests themselves."""

from __future__ import annotations

import pytest

from tests.conftest import _uses_database


def test_a_test_that_cannot_reach_the_database_is_left_out(request):
    assert not _uses_database(request.node)


@pytest.mark.django_db
def test_a_test_with_the_marker_is_kept(request):
    assert _uses_database(request.node)


def test_a_test_asking_for_db_is_kept(db, request):
    assert _uses_database(request.node)


def test_a_test_asking_for_a_fixture_that_needs_the_database_is_kept(annotator_a, request):
    assert _uses_database(request.node)


def test_a_test_asking_for_transactional_db_is_kept(transactional_db, request):
    assert _uses_database(request.node)
