# Drop the indexes Django made of its own for a foreign key (or a db_index column) whose
# look-ups an index or unique constraint leading with the same column already serves: every
# index is one more write for each row an import adds, a million at a time.
# (A table of a few rows: Django's AlterField, which copies the table on SQLite, costs nothing.)

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(
                db_index=False,
                help_text="The account the token acts as, with that account's roles.",
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
