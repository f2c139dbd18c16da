# Label / FinalLabel / FinalLabelRevision.question PROTECT -> RESTRICT: deleting a study deletes
# its questions with the items' answers; a question with answers cannot be deleted on its own.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0008_item_question_constraints"),
        ("studies", "0002_copy_from_annotate"),
    ]

    operations = [
        migrations.AlterField(
            model_name="finallabel",
            name="question",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="final_labels",
                to="studies.question",
            ),
        ),
        migrations.AlterField(
            model_name="finallabelrevision",
            name="question",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="final_label_revisions",
                to="studies.question",
            ),
        ),
        migrations.AlterField(
            model_name="label",
            name="question",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.RESTRICT, related_name="labels", to="studies.question"
            ),
        ),
    ]
