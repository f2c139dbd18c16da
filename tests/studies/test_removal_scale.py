"""Removing, restoring and deleting more items than one statement may name: every
read and every deletion goes a chunk of items at a time, so SQLite's limit of bound values per
statement (32,766 on a stock build; lowered here, ``tests.sqlite_limits``) is never reached.

Django's deletion collector looks up related rows 500 parents at a time on SQLite, and deletes
and clears them 100 at a time; the removal hands it a chunk of items at a time. Its
``SET_NULL``, though, sends one UPDATE naming every deleted parent: ``ItemChange.item`` clears
its link with ``studies.models.set_null_in_batches`` instead."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command

from annotate.imports import labels_import
from annotate.models import Assignment, FinalLabel, Label, LabelRevision
from detectors.models import Prediction
from estimates.models import RoundItem, SamplingRound
from studies.models import Image, Item, ItemChange, ItemChangeAction, ItemImage, Study
from studies.removal import items_remove, items_resolve
from tests.factories import PredictionFactory, PromptFactory
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

pytestmark = pytest.mark.django_db


def items_with_images(study: Study, n: int) -> list[Item]:
    """``n`` one-image items of ``study``, each with its own image row (no file: the backup
    records a missing file as such), created in bulk."""
    prompt = PromptFactory(study=study)
    images = Image.objects.bulk_create(
        [
            Image(sha256=f"{x:064d}", file=f"images/00/{x:064d}.png", width=8, height=8, format="PNG")
            for x in range(n)
        ]
    )
    items = Item.objects.bulk_create(
        [Item(study=study, prompt=prompt, key=f"k/{x:04d}.png") for x in range(n)]
    )
    ItemImage.objects.bulk_create(
        [
            ItemImage(item=item, image=image, role="image", source_path=item.key)
            for item, image in zip(items, images, strict=True)
        ]
    )
    return items


def test_removing_and_restoring_more_items_than_a_statement_may_name_goes_a_chunk_at_a_time(
    settings, study, tmp_path, django_capture_on_commit_callbacks
):
    """150 items with labels, agreed final labels, seats, history, a prediction on each image,
    round entries and an audit record each, removed with their work and restored, with
    SQLite's limit at 120 values a statement: every statement holds a chunk of 50 or fewer."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    items = items_with_images(study, 150)
    csv = tmp_path / "labels.csv"
    csv.write_text(
        "item,annotator,label\n" + "".join(f"{i.key},anna,male\n{i.key},ben,male\n" for i in items),
        encoding="utf-8",
    )
    assert labels_import(study=study, csv_path=csv, add_annotators=True).accepted == 300
    for item in items:
        PredictionFactory(image=item.item_images.get().image)
    sampling = SamplingRound.objects.create(
        study=study,
        number=1,
        detector="fake",
        detector_version="1",
        design="uniform",
        seed=1,
        budget=1,
        n_selected=1,
    )
    RoundItem.objects.bulk_create(
        [RoundItem(round=sampling, item=item, pi=0.5, selected=True) for item in items]
    )
    ItemChange.objects.bulk_create(
        [
            ItemChange(study=study, item=item, item_key=item.key, action=ItemChangeAction.UPDATED)
            for item in items
        ]
    )
    before = {model: model.objects.count() for model in (Label, LabelRevision, FinalLabel, Assignment)}
    backup = tmp_path / "removed.json"
    with sqlite_variable_limit(120), django_capture_on_commit_callbacks(execute=True):
        chosen = items_resolve(study=study, keys=[item.key for item in items])
        result = items_remove(study=study, items=chosen, with_labels=True, backup_path=backup)
    assert len(result.keys) == 150
    assert result.held["k/0000.png"] == {
        "labels": 2,
        "final labels": 1,
        "final label revisions": 1,
        "round items": 1,
        "predictions": 1,
    }
    assert not Item.objects.filter(study=study).exists()
    assert not Image.objects.exists()
    assert not Prediction.objects.exists()
    # The earlier audit records stay, their item link cleared; each item has its removal record.
    assert ItemChange.objects.filter(action=ItemChangeAction.UPDATED, item=None).count() == 150
    assert ItemChange.objects.filter(action=ItemChangeAction.REMOVED).count() == 150

    with sqlite_variable_limit(120):
        call_command("import_images", study=study.slug, restore=str(backup), stdout=io.StringIO())
    assert Item.objects.filter(study=study).count() == 150
    assert Prediction.objects.count() == RoundItem.objects.count() == 150
    assert {model: model.objects.count() for model in before} == before


def test_deleting_a_study_of_more_items_than_a_statement_may_name_clears_their_audit_links_in_batches(
    study,
):
    """Django's collector reads related rows 500 items at a time on SQLite: with the limit at
    600 values, a study of 700 items whose audit records point at them is deleted (Django's own
    SET_NULL named all 700 in one UPDATE)."""
    items = items_with_images(study, 700)
    ItemChange.objects.bulk_create(
        [
            ItemChange(study=study, item=item, item_key=item.key, action=ItemChangeAction.UPDATED)
            for item in items
        ]
    )
    with sqlite_variable_limit(600):
        Study.objects.get(pk=study.pk).delete()
    assert not Item.objects.exists()
    assert not ItemChange.objects.exists()


def test_an_item_removed_keeps_the_audit_records_of_its_earlier_changes(study, tmp_path: Path):
    """The link of each earlier record is cleared, the records and their keys stay."""
    items = items_with_images(study, 3)
    ItemChange.objects.bulk_create(
        [
            ItemChange(study=study, item=item, item_key=item.key, action=ItemChangeAction.UPDATED)
            for item in items
        ]
    )
    items_remove(study=study, items=items[:2])
    kept = dict(
        ItemChange.objects.filter(action=ItemChangeAction.UPDATED).values_list("item_key", "item__key")
    )
    assert kept == {"k/0000.png": None, "k/0001.png": None, "k/0002.png": "k/0002.png"}
