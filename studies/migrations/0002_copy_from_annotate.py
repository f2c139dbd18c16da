"""Carry a database of the one-question schema forward: annotate's studies, prompts and images
become studies' Study/Question, Prompt, Item + Image + ItemImage, keeping every primary key (an
item keeps its old image's id, so URLs and exports stay the same). Image files shared by several
old images (the same bytes in two studies) become one Image. A fresh database copies nothing."""

from __future__ import annotations

from django.core.management.color import no_style
from django.db import migrations


def copy_forward(apps, schema_editor):
    OldStudy = apps.get_model("annotate", "Study")
    OldPrompt = apps.get_model("annotate", "Prompt")
    OldImage = apps.get_model("annotate", "Image")
    Study = apps.get_model("studies", "Study")
    Question = apps.get_model("studies", "Question")
    Prompt = apps.get_model("studies", "Prompt")
    Item = apps.get_model("studies", "Item")
    Image = apps.get_model("studies", "Image")
    ItemImage = apps.get_model("studies", "ItemImage")

    for old in OldStudy.objects.order_by("pk"):
        study = Study.objects.create(
            pk=old.pk,
            name=old.name,
            slug=old.slug,
            protocol="gender",
            description=old.description,
            labels_per_item=old.labels_per_image,
            agreement="unanimous",
            show_prompt=old.show_prompt,
            claim_timeout_seconds=old.claim_timeout_seconds,
        )
        Study.objects.filter(pk=study.pk).update(created_at=old.created_at)
        Question.objects.create(
            study=study,
            key="gender",
            text="Which gender does the person in the image present?",
            choices=old.label_set,
            kind="choice",
            unresolvable_value=old.unresolvable_label,
            position=0,
        )
    # The memberships, straight from table to table (no model instances of two states mixed).
    OldMembers = OldStudy.annotators.through
    Members = Study.annotators.through
    Members.objects.bulk_create(
        [Members(study_id=s, user_id=u) for s, u in OldMembers.objects.values_list("study_id", "user_id")]
    )
    Prompt.objects.bulk_create(
        [
            Prompt(pk=p.pk, study_id=p.study_id, category=p.category, word=p.word, text=p.text)
            for p in OldPrompt.objects.order_by("pk")
        ],
        batch_size=1000,
    )
    image_by_sha: dict[str, int] = {}
    items, images, links = [], [], []
    for old in OldImage.objects.order_by("pk").iterator(chunk_size=2000):
        if old.sha256 not in image_by_sha:
            image_by_sha[old.sha256] = old.pk
            images.append(
                Image(
                    pk=old.pk,
                    sha256=old.sha256,
                    file=old.file,
                    width=old.width,
                    height=old.height,
                    format=old.format,
                    created_at=old.created_at,
                )
            )
        items.append(
            Item(
                pk=old.pk,
                study_id=old.study_id,
                key=old.source_path,
                prompt_id=old.prompt_id,
                t2i_model=old.t2i_model,
                seed=old.seed,
                index=old.index,
                params=old.params,
                completed_seats=old.completed_seats,
                created_at=old.created_at,
            )
        )
        links.append(
            ItemImage(item_id=old.pk, image_id=image_by_sha[old.sha256], role="image", source_path=old.source_path)
        )
    Image.objects.bulk_create(images, batch_size=1000)
    Item.objects.bulk_create(items, batch_size=1000)
    ItemImage.objects.bulk_create(links, batch_size=1000)
    # auto_now_add overwrote created_at on insert: take the old moments back.
    with schema_editor.connection.cursor() as cursor:
        for table in ("studies_item", "studies_image"):
            cursor.execute(
                f"UPDATE {table} SET created_at = "
                f"(SELECT o.created_at FROM annotate_image o WHERE o.id = {table}.id)"
            )
    _reset_sequences(schema_editor, [Study, Question, Prompt, Item, Image, ItemImage])


def _reset_sequences(schema_editor, models):
    """Rows were inserted with explicit ids: move PostgreSQL's sequences past them."""
    connection = schema_editor.connection
    statements = connection.ops.sequence_reset_sql(no_style(), models)
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0001_initial"),
        ("annotate", "0004_label_revision_request_id"),
        ("detectors", "0002_detector_run_study_optional"),
    ]

    operations = [migrations.RunPython(copy_forward, migrations.RunPython.noop)]
