"""Fill the new item and question columns of seats, labels and final labels from the old
image ids (a migration of its own, between adding the columns and dropping the old ones:
PostgreSQL refuses to build indexes or alter a table in the transaction that updated its rows)."""

from __future__ import annotations

from django.db import migrations

_QUESTION_OF_ITEM = (
    "(SELECT q.id FROM studies_question q JOIN studies_item i ON i.study_id = q.study_id "
    "WHERE i.id = {table}.item_id AND q.key = 'gender')"
)


def fill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table in (
            "annotate_assignment",
            "annotate_label",
            "annotate_finallabel",
            "annotate_finallabelrevision",
        ):
            cursor.execute(f"UPDATE {table} SET item_id = image_id")
        for table in ("annotate_label", "annotate_finallabel", "annotate_finallabelrevision"):
            cursor.execute(f"UPDATE {table} SET question_id = {_QUESTION_OF_ITEM.format(table=table)}")


class Migration(migrations.Migration):
    dependencies = [("annotate", "0005_labels_per_item_and_question")]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
