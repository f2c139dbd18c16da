# Drop the indexes Django made of its own for a foreign key (or a db_index column) whose
# look-ups an index or unique constraint leading with the same column already serves: every
# index is one more write for each row an import adds, a million at a time.
# DropFieldIndex: AlterField by DROP INDEX (SQLite would copy each table).

import django.db.models.deletion
from django.db import migrations, models

from studies.migration_operations import DropFieldIndex


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0008_item_image_file_stamp"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="prompt",
            name="studies_pro_study_i_f91243_idx",
        ),
        DropFieldIndex(
            model_name="item",
            name="study",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="items",
                to="studies.study",
            ),
        ),
        DropFieldIndex(
            model_name="item",
            name="t2i_model",
            field=models.CharField(
                blank=True, help_text="T2I or editing model name, e.g. sdxl.", max_length=200
            ),
        ),
        DropFieldIndex(
            model_name="itemchange",
            name="study",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="item_changes",
                to="studies.study",
            ),
        ),
        DropFieldIndex(
            model_name="itemimage",
            name="item",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="item_images",
                to="studies.item",
            ),
        ),
        DropFieldIndex(
            model_name="prompt",
            name="study",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="prompts",
                to="studies.study",
            ),
        ),
        DropFieldIndex(
            model_name="question",
            name="study",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="questions",
                to="studies.study",
            ),
        ),
    ]
