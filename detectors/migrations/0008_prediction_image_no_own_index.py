# Drop the indexes Django made of its own for a foreign key (or a db_index column) whose
# look-ups an index or unique constraint leading with the same column already serves: every
# index is one more write for each row an import adds, a million at a time.
# DropFieldIndex: AlterField by DROP INDEX (SQLite would copy each table).

import django.db.models.deletion
from django.db import migrations, models

from studies.migration_operations import DropFieldIndex


class Migration(migrations.Migration):
    dependencies = [
        ("detectors", "0007_prediction_run_index"),
        ("studies", "0009_no_redundant_indexes"),
    ]

    operations = [
        DropFieldIndex(
            model_name="prediction",
            name="image",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="predictions",
                to="studies.image",
            ),
        ),
    ]
