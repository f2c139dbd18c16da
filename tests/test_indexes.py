"""No table of BiasLab's own keeps an index that another one already serves.

An index whose columns begin another index or unique constraint of the same table answers no
look-up the longer one does not, and costs one more write for every row an import adds (a
million labels: a million more index entries on each such index). Django makes such indexes
on its own for a foreign key; the models turn them off where a constraint leads with the key.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

OWN_APPS = {"accounts", "studies", "annotate", "detectors", "generation", "reports", "estimates"}


def _partial_index_names() -> set[str]:
    return {
        index.name
        for model in apps.get_models()
        for index in model._meta.indexes
        if index.condition is not None
    }


@pytest.mark.django_db
def test_no_index_of_our_tables_is_the_start_of_another():
    partial = _partial_index_names()
    # The models' own tables (a many-to-many field's table is Django's, with its two indexes).
    tables = sorted(
        model._meta.db_table
        for model in apps.get_models()
        if model._meta.app_label in OWN_APPS and not model._meta.proxy and model._meta.managed
    )
    redundant = []
    with connection.cursor() as cursor:
        for table in tables:
            found = connection.introspection.get_constraints(cursor, table)
            # Every index and unique constraint over plain columns (PostgreSQL's "_like" copy of
            # a text column's index has a different operator class: it is not the same index).
            keys = {
                name: tuple(info["columns"])
                for name, info in found.items()
                if (info["index"] or info["unique"])
                and not info["primary_key"]
                and all(info["columns"])
                and not name.endswith("_like")
            }
            for name, columns in keys.items():
                if found[name]["unique"] or name in partial:
                    continue
                for other, longer in keys.items():
                    if other != name and other not in partial and longer[: len(columns)] == columns:
                        redundant.append(f"{table}: {name} {columns} starts {other} {longer}")
    assert redundant == []
