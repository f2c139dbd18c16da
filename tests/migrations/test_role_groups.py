"""The role groups come with ``migrate``; unapplying their migration removes only the groups
nobody is in (a role given to someone is never taken back by a rollback)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from studies import permissions
from tests.factories import UserFactory

pytestmark = pytest.mark.migrations

BEFORE = [("studies", "0011_item_change_restored")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _names() -> set[str]:
    return set(Group.objects.filter(name__in=permissions.ROLE_GROUPS).values_list("name", flat=True))


def test_the_groups_migration_round_trips_and_keeps_groups_in_use(transactional_db):
    Group.objects.filter(name__in=permissions.ROLE_GROUPS).delete()  # as on a database before it
    try:
        _migrate(BEFORE)
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        assert _names() == {"annotator", "researcher"}
        UserFactory(username="rita", role=permissions.RESEARCHER)
        _migrate(BEFORE)
        assert _names() == {"researcher"}
        assert Group.objects.get(name="researcher").user_set.filter(username="rita").exists()
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert _names() == {"annotator", "researcher"}
