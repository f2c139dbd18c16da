# ItemChange.item clears its link with studies.models.set_null_in_batches instead of Django's
# SET_NULL (one UPDATE with a value per deleted item). No SQL: on_delete lives in Python.

import studies.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0009_no_redundant_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="itemchange",
            name="item",
            field=models.ForeignKey(
                blank=True,
                help_text="The item changed; empty once it was removed.",
                null=True,
                on_delete=studies.models.set_null_in_batches,
                related_name="changes",
                to="studies.item",
            ),
        ),
    ]
