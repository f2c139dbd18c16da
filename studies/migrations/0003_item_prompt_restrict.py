# Item.prompt PROTECT -> RESTRICT: a study with items can be deleted (its prompts and items go
# together); a prompt that items still use cannot be deleted on its own.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0002_copy_from_annotate"),
    ]

    operations = [
        migrations.AlterField(
            model_name="item",
            name="prompt",
            field=models.ForeignKey(
                blank=True,
                help_text="The prompt the item's image was generated or edited with; empty for seed photos.",
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="items",
                to="studies.prompt",
            ),
        ),
    ]
