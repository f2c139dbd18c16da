"""Seats, labels and final labels move from annotate's images to studies' items, and labels and
final labels gain their question. Every old row keeps its values: an item has the id of the
image it was made from (studies 0002), and every old label answered the gender question of its
study. Then annotate's own Study, Prompt and Image tables go (studies holds them now)."""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
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
    dependencies = [
        ("annotate", "0004_label_revision_request_id"),
        ("studies", "0002_copy_from_annotate"),
        ("detectors", "0005_prediction_drop_verdict_columns"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="assignment", name="assignment_one_per_slot"),
        migrations.RemoveConstraint(model_name="assignment", name="assignment_one_per_annotator"),
        migrations.RemoveIndex(model_name="assignment", name="assignment_open_seat_idx"),
        migrations.RemoveConstraint(model_name="label", name="label_one_per_annotator"),
        migrations.RemoveIndex(model_name="finallabel", name="annotate_fi_value_af6dea_idx"),
        migrations.AddField(model_name="assignment", name="item", field=_item(True, "+")),
        migrations.AddField(model_name="label", name="item", field=_item(True, "+")),
        migrations.AddField(model_name="finallabel", name="item", field=_item(True, "+")),
        migrations.AddField(model_name="finallabelrevision", name="item", field=_item(True, "+")),
        migrations.AddField(model_name="label", name="question", field=_question(True, "+")),
        migrations.AddField(model_name="finallabel", name="question", field=_question(True, "+")),
        migrations.AddField(model_name="finallabelrevision", name="question", field=_question(True, "+")),
    ]
