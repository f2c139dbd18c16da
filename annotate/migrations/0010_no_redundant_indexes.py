# Drop the indexes Django made of its own for a foreign key (or a db_index column) whose
# look-ups an index or unique constraint leading with the same column already serves: every
# index is one more write for each row an import adds, a million at a time.
# DropFieldIndex: AlterField by DROP INDEX (SQLite would copy each table).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from studies.migration_operations import DropFieldIndex


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0009_question_restrict"),
        ("studies", "0009_no_redundant_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        DropFieldIndex(
            model_name="assignment",
            name="annotator",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="assignments",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        DropFieldIndex(
            model_name="assignment",
            name="item",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="assignments",
                to="studies.item",
            ),
        ),
        DropFieldIndex(
            model_name="finallabel",
            name="item",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="final_labels",
                to="studies.item",
            ),
        ),
        DropFieldIndex(
            model_name="finallabel",
            name="question",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="final_labels",
                to="studies.question",
            ),
        ),
        DropFieldIndex(
            model_name="label",
            name="annotator",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="labels",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        DropFieldIndex(
            model_name="label",
            name="item",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="labels",
                to="studies.item",
            ),
        ),
    ]
