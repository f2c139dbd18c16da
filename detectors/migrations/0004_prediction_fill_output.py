"""Fill the typed output of old predictions (its own migration: PostgreSQL refuses to build
indexes or alter a table in the transaction that updated its rows)."""

from __future__ import annotations

from django.db import migrations


def to_output(apps, schema_editor):
    Prediction = apps.get_model("detectors", "Prediction")
    ItemImage = apps.get_model("studies", "ItemImage")
    file_of = dict(ItemImage.objects.filter(role="image").values_list("item_id", "image_id"))
    seen: set[tuple[int, str, str]] = set()
    duplicates: list[int] = []
    batch = []
    for p in Prediction.objects.order_by("pk").iterator(chunk_size=2000):
        p.image_file_id = file_of[p.image_id]
        key = (p.image_file_id, p.detector, p.version)
        if key in seen:
            duplicates.append(p.pk)
            continue
        seen.add(key)
        p.kind = "gender"
        if p.status == "ok":
            output = {"label": p.verdict, "reason": p.filter_reason, "scores": p.scores or {}}
            if p.detail:
                output["detail"] = p.detail
            p.output = output
        else:
            p.output = {}
            p.error = p.error or "failed"
        batch.append(p)
        if len(batch) >= 2000:
            Prediction.objects.bulk_update(batch, ["image_file", "kind", "output", "error"])
            batch = []
    if batch:
        Prediction.objects.bulk_update(batch, ["image_file", "kind", "output", "error"])
    Prediction.objects.filter(pk__in=duplicates).delete()


class Migration(migrations.Migration):
    dependencies = [("detectors", "0003_prediction_output_kinds")]

    operations = [migrations.RunPython(to_output, migrations.RunPython.noop)]
