"""Second half of predictions with typed output: drop the old columns (a migration of its own:
PostgreSQL refuses to alter a table in the transaction that just updated its rows)."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("detectors", "0004_prediction_fill_output")]

    operations = [
        migrations.RemoveField(model_name="prediction", name="image"),
        migrations.RemoveField(model_name="prediction", name="verdict"),
        migrations.RemoveField(model_name="prediction", name="filter_reason"),
        migrations.RemoveField(model_name="prediction", name="scores"),
        migrations.RemoveField(model_name="prediction", name="detail"),
        migrations.RenameField(model_name="prediction", old_name="image_file", new_name="image"),
        migrations.AlterField(
            model_name="prediction",
            name="image",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="predictions", to="studies.image"
            ),
        ),
        migrations.AddConstraint(
            model_name="prediction",
            constraint=models.UniqueConstraint(
                fields=("image", "detector", "version"), name="prediction_unique_version"
            ),
        ),
        migrations.AddConstraint(
            model_name="prediction",
            constraint=models.CheckConstraint(
                condition=models.Q(("status", "ok"), models.Q(("error", ""), _negated=True), _connector="OR"),
                name="prediction_failure_has_error",
            ),
        ),
        migrations.AddIndex(
            model_name="prediction",
            index=models.Index(fields=["detector", "status"], name="detectors_p_detecto_status_idx"),
        ),
        migrations.AlterField(
            model_name="detectorrun",
            name="study",
            field=models.ForeignKey(
                blank=True,
                help_text="Only images of this study, if set; empty when the run covers every study.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="detector_runs",
                to="studies.study",
            ),
        ),
    ]
