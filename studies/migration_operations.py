"""Migration operations of BiasLab's own. ``DropFieldIndex``: an ``AlterField`` to
``db_index=False`` run as a plain ``DROP INDEX`` (SQLite would copy the whole table)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class DropFieldIndex(migrations.AlterField):
    """``AlterField`` to ``db_index=False``: forwards drops the field's single-column indexes,
    found by column; backwards, Django's ``AlterField`` makes them again."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        connection = schema_editor.connection
        if not self.allow_migrate_model(connection.alias, model):
            return
        column = model._meta.get_field(self.name).column
        declared = {index.name for index in model._meta.indexes}
        with connection.cursor() as cursor:
            found = connection.introspection.get_constraints(cursor, model._meta.db_table)
        for name, info in sorted(found.items()):
            # Also PostgreSQL's second index of a text column (``…_like``, for LIKE 'prefix%').
            if (
                info["index"]
                and not info["unique"]
                and not info["primary_key"]
                and info["columns"] == [column]
                and name not in declared
            ):
                schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")
