"""Predictions belong to image files (studies.Image) and store an ``output`` of a declared kind.

Old rows: the old image id maps to the file of the item that kept that id; verdict, filter
reason, scores and free-text detail become the gender output {label, reason, scores, detail}.
Two old predictions of the same bytes (the same file imported in two studies) by the same
detector version collapse into the first."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("detectors", "0002_detector_run_study_optional"),
        ("studies", "0002_copy_from_annotate"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="prediction", name="prediction_unique_version"),
        migrations.RemoveConstraint(model_name="prediction", name="prediction_verdict_matches_status"),
        migrations.RemoveConstraint(model_name="prediction", name="prediction_reason_only_when_filtered"),
        migrations.RemoveIndex(model_name="prediction", name="detectors_p_detecto_f3b75b_idx"),
        migrations.AddField(
            model_name="prediction",
            name="kind",
            field=models.CharField(
                choices=[
                    ("gender", "Gender verdict {label, reason, scores}"),
                    ("attributes", "Score per attribute {scores: {question key: float}}"),
                    ("measurements", "Measurements {face, age, gender, skin_gray}"),
                    ("objects", "Object instances {objects: [{class, confidence, box}]}"),
                ],
                default="gender",
                help_text="The kind of output the detector declares; fixes the schema of ``output``.",
                max_length=20,
            ),
        ),
        migrations.AddField(
            model_name="prediction",
            name="output",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The detector's output, valid for its kind (empty when status is failed), e.g. "
                "{'label': 'filtered', 'reason': 'no_face', 'scores': {...}}.",
            ),
        ),
        migrations.AddField(
            model_name="prediction",
            name="image_file",
            field=models.ForeignKey(
                null=True, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="studies.image"
            ),
        ),
    ]
