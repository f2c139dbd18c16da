"""``prepare_box_check``: a detector's boxes copied onto the items of an objects study, for
annotators to confirm or reject; idempotent, and never under labels already given."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from detectors.kinds import KIND_OBJECTS
from detectors.models import Prediction, PredictionStatus
from protocols.objects.services import BoxCheckRefused, box_check_prepare
from studies.models import Image, Item, ItemImage
from tests.factories import (
    FinalLabelFactory,
    ItemFactory,
    LabelFactory,
    PredictionFactory,
    PromptFactory,
    StudyFactory,
    image_of,
    question_of,
)
from tests.sqlite_limits import sqlite_variable_limit

pytestmark = pytest.mark.django_db

CUP = {"class": "cup", "confidence": 0.5, "box": [1.0, 2.0, 10.0, 12.0]}
TIE = {"class": "tie", "confidence": 0.9, "box": [4.0, 4.0, 8.0, 30.0]}
DOG = {"class": "dog", "confidence": 0.2, "box": [0.0, 0.0, 32.0, 32.0]}


def objects(item, instances, *, detector="yolo_objects", version="1", status=PredictionStatus.OK):
    return PredictionFactory(
        image=image_of(item),
        detector=detector,
        version=version,
        kind=KIND_OBJECTS,
        status=status,
        output={"objects": instances} if status == PredictionStatus.OK else {},
        error="" if status == PredictionStatus.OK else "CUDA out of memory",
    )


@pytest.fixture
def study():
    return StudyFactory(slug="cooccur", protocol="objects")


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study)
    return [ItemFactory(prompt=prompt, metadata={"gender": "male", "template": "0"}) for _ in range(3)]


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("prepare_box_check", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def metadata(item) -> dict:
    return Item.objects.get(pk=item.pk).metadata


def test_each_item_gets_its_latest_prediction_most_confident_box_first(study, items):
    objects(items[0], [DOG, CUP], version="1")
    objects(items[0], [CUP, TIE], version="2")  # written later: the latest
    objects(items[1], [])
    out, err = run("--study", "cooccur", "--detector", "yolo_objects")
    assert metadata(items[0]) == {
        "gender": "male",
        "template": "0",
        "boxes": [TIE, CUP],
        "boxes_source": "yolo_objects@2",
    }
    assert metadata(items[1])["boxes"] == []  # nothing found: nothing to confirm, missed may be typed
    assert "boxes" not in metadata(items[2])  # no prediction: left alone
    assert out.strip() == (
        "Prepared 2 item(s) with 2 box(es) (yolo_objects@1: 1, yolo_objects@2: 1); "
        "0 already prepared; 1 without a prediction of yolo_objects."
    )
    assert err == ""


def test_minimum_confidence_and_maximum_boxes_narrow_what_is_checked(study, items):
    objects(items[0], [DOG, CUP, TIE])
    summary = box_check_prepare(study=study, detector="yolo_objects", min_confidence=0.3)
    assert metadata(items[0])["boxes"] == [TIE, CUP]
    assert summary.n_boxes == 2
    box_check_prepare(study=study, detector="yolo_objects", max_boxes=1)
    assert metadata(items[0])["boxes"] == [TIE]


def test_running_it_again_changes_nothing(study, items):
    objects(items[0], [CUP])
    run("--study", "cooccur", "--detector", "yolo_objects")
    out, _ = run("--study", "cooccur", "--detector", "yolo_objects")
    assert out.startswith("Prepared 0 item(s) with 0 box(es); 1 already prepared;")


def test_an_item_with_labels_keeps_its_boxes_and_the_command_names_it(study, items):
    objects(items[0], [CUP])
    objects(items[1], [CUP])
    run("--study", "cooccur", "--detector", "yolo_objects")
    LabelFactory(item=items[0], question=question_of(items[0], "boxes"), value="yes")
    FinalLabelFactory(item=items[1], question=question_of(items[1], "missed"), value="")
    objects(items[0], [CUP, TIE], version="2")
    objects(items[1], [TIE], version="2")
    out, err = run("--study", "cooccur", "--detector", "yolo_objects")
    assert metadata(items[0])["boxes"] == [CUP]
    assert metadata(items[1])["boxes"] == [CUP]
    assert out.startswith("Prepared 0 item(s)")
    assert err.strip() == (
        f"Kept the boxes of 2 item(s) that already have labels (answers are per box, in order): "
        f"{items[0].key}, {items[1].key}."
    )


def test_a_labelled_item_whose_boxes_would_not_change_is_simply_already_prepared(study, items):
    objects(items[0], [CUP])
    run("--study", "cooccur", "--detector", "yolo_objects")
    LabelFactory(item=items[0], question=question_of(items[0], "boxes"), value="yes")
    summary = box_check_prepare(study=study, detector="yolo_objects")
    assert (summary.unchanged, summary.refused) == (1, ())


def test_a_failed_prediction_is_skipped_for_the_latest_ok_one(study, items):
    objects(items[0], [CUP], version="1")
    objects(items[0], [], version="2", status=PredictionStatus.FAILED)
    box_check_prepare(study=study, detector="yolo_objects")
    assert metadata(items[0])["boxes_source"] == "yolo_objects@1"


def test_predictions_of_another_detector_or_kind_are_not_used(study, items):
    objects(items[0], [CUP], detector="other_yolo")
    PredictionFactory(image=image_of(items[1]), detector="yolo_objects")  # a gender output
    with pytest.raises(
        CommandError,
        match=r"No image of study 'cooccur' has an objects prediction of detector 'yolo_objects': run run_detectors --detector yolo_objects --study cooccur first\.",
    ):
        run("--study", "cooccur", "--detector", "yolo_objects")


def test_a_study_without_a_box_question_is_refused():
    gender = StudyFactory(slug="gender")
    ItemFactory(prompt=PromptFactory(study=gender))
    with pytest.raises(CommandError, match=r"Study 'gender' asks no box question .*--protocol objects"):
        run("--study", "gender", "--detector", "yolo_objects")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_confidence": 1.5}, r"minimum confidence must be in \[0, 1\], not 1\.5"),
        ({"max_boxes": 0}, r"maximum number of boxes must be at least 1, not 0"),
    ],
)
def test_nonsense_limits_are_refused(study, items, kwargs, message):
    objects(items[0], [CUP])
    with pytest.raises(BoxCheckRefused, match=message):
        box_check_prepare(study=study, detector="yolo_objects", **kwargs)


def test_an_unknown_study_names_the_existing_ones(study):
    with pytest.raises(
        CommandError, match=r"No study with slug 'nope' \(existing studies: cooccur\).*create_study"
    ):
        run("--study", "nope", "--detector", "yolo_objects")


def test_a_study_of_more_images_than_a_statement_may_name_is_prepared(study):
    """1,050 items, SQLite's limit of bound values at 1,020: the study's images are read
    with a subquery, not named one by one (the update goes 333 items a statement, as Django
    splits it for SQLite's default limit)."""
    prompt = PromptFactory(study=study)
    shown = [ItemFactory(prompt=prompt, metadata={"gender": "male", "template": "0"})]
    objects(shown[0], [CUP])
    first = shown[0].item_images.get()
    images = Image.objects.bulk_create(
        [
            Image(sha256=f"{x:064d}", file=f"images/{x}.png", width=8, height=8, format="PNG")
            for x in range(1049)
        ]
    )
    items = Item.objects.bulk_create(
        [Item(study=study, prompt=prompt, key=f"k/{x}.png", metadata={"gender": "male"}) for x in range(1049)]
    )
    ItemImage.objects.bulk_create(
        [
            ItemImage(item=item, image=image, role=first.role, source_path=item.key)
            for item, image in zip(items, images, strict=True)
        ]
    )
    Prediction.objects.bulk_create(
        [
            Prediction(
                image=image,
                detector="yolo_objects",
                version="1",
                kind=KIND_OBJECTS,
                status=PredictionStatus.OK,
                output={"objects": [TIE]},
            )
            for image in images
        ]
    )
    with sqlite_variable_limit(1020):
        out, _ = run("--study", "cooccur", "--detector", "yolo_objects")
    assert out.startswith("Prepared 1050 item(s) with 1050 box(es)")
    assert metadata(items[-1])["boxes"] == [TIE]
