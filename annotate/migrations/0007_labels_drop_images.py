"""Second half of moving labels to items and questions (a migration of its own: PostgreSQL
refuses to alter a table in the transaction that just updated its rows)."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


def _item(null: bool, related_name: str) -> models.ForeignKey:
    return models.ForeignKey(
        null=null, on_delete=django.db.models.deletion.CASCADE, related_name=related_name, to="studies.item"
    )


def _question(null: bool, related_name: str) -> models.ForeignKey:
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.PROTECT,
        related_name=related_name,
        to="studies.question",
    )


class Migration(migrations.Migration):
    dependencies = [("annotate", "0006_labels_fill_items")]

    operations = [
        migrations.RemoveField(model_name="assignment", name="image"),
        migrations.RemoveField(model_name="label", name="image"),
        migrations.RemoveField(model_name="finallabel", name="image"),
        migrations.RemoveField(model_name="finallabelrevision", name="image"),
        migrations.AlterField(model_name="assignment", name="item", field=_item(False, "assignments")),
        migrations.AlterField(model_name="label", name="item", field=_item(False, "labels")),
        migrations.AlterField(model_name="finallabel", name="item", field=_item(False, "final_labels")),
        migrations.AlterField(
            model_name="finallabelrevision", name="item", field=_item(False, "final_label_revisions")
        ),
        migrations.AlterField(model_name="label", name="question", field=_question(False, "labels")),
        migrations.AlterField(
            model_name="finallabel", name="question", field=_question(False, "final_labels")
        ),
        migrations.AlterField(
            model_name="finallabelrevision", name="question", field=_question(False, "final_label_revisions")
        ),
        migrations.DeleteModel(name="Image"),
        migrations.DeleteModel(name="Prompt"),
        migrations.DeleteModel(name="Study"),
    ]
