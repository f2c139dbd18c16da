from __future__ import annotations

import io
import threading
from typing import Any, cast

import pytest
from django.db import connection

from detectors import registry
from detectors.base import DetectorOutput
from detectors.kinds import OutputInvalid
from detectors.models import DetectorRun, Prediction, PredictionStatus
from detectors.selectors import Shard, images_in_scope
from detectors.services import PredictionRecord, prediction_store
from studies.progress import Progress, format_duration
from tests.factories import ItemFactory, PromptFactory, image_of
from tests.fakes import FakeDetector, registered_fake


@pytest.fixture
def images(study):
    """The files of five one-image items of the gender study."""
    prompt = PromptFactory(study=study)
    return [image_of(ItemFactory(prompt=prompt)) for _ in range(5)]


def _records(images, verdict="male"):
    return [PredictionRecord.from_output(i.pk, DetectorOutput(verdict=verdict), 0.01) for i in images]


@pytest.mark.django_db
def test_prediction_store_writes_ok_and_failed_rows_and_counts_them(images):
    run = DetectorRun.objects.create(detector="fake", version="1")
    records = [*_records(images[:3]), PredictionRecord.failure(images[3].pk, "boom")]
    result = prediction_store(detector="fake", version="1", records=records, run=run)
    assert (result.ok, result.failed) == (3, 1)
    failed = Prediction.objects.get(status=PredictionStatus.FAILED)
    assert (failed.image_id, failed.verdict, failed.output, failed.error) == (images[3].pk, "", {}, "boom")
    assert set(run.predictions.values_list("image_id", flat=True)) == {i.pk for i in images[:4]}
    ok = Prediction.objects.filter(status=PredictionStatus.OK).first()
    assert (ok.kind, ok.output) == ("gender", {"label": "male", "reason": "", "scores": {}})


@pytest.mark.django_db
def test_prediction_store_validates_every_output_and_stores_nothing_of_a_bad_batch(images):
    bad = PredictionRecord(image_id=images[1].pk, kind="measurements", output={"face": True, "age": 200})
    with pytest.raises(OutputInvalid, match=r"^gender: missing .*image file"):
        prediction_store(detector="fake", version="1", records=[*_records(images[:1]), bad])
    bad = PredictionRecord(
        image_id=images[1].pk,
        kind="measurements",
        output={"face": True, "age": 200, "gender": None, "skin_gray": None},
    )
    with pytest.raises(OutputInvalid, match=r"^age: must be between 0 and 120, got 200 \(image file \d+\)"):
        prediction_store(detector="fake", version="1", records=[*_records(images[:1]), bad])
    assert Prediction.objects.count() == 0


@pytest.mark.django_db
def test_prediction_store_keeps_the_normalised_output_of_each_kind(images):
    records = [
        PredictionRecord(
            image_id=images[0].pk,
            kind="objects",
            output={"objects": [{"class": "tie", "confidence": 1, "box": [0, 0, 4, 8]}]},
        ),
        PredictionRecord(image_id=images[1].pk, kind="attributes", output={"scores": {"boots": 1}}),
    ]
    assert prediction_store(detector="det", version="1", records=records).ok == 2
    stored = dict(Prediction.objects.values_list("kind", "output"))
    assert stored["objects"] == {
        "objects": [{"class": "tie", "confidence": 1.0, "box": [0.0, 0.0, 4.0, 8.0]}]
    }
    assert stored["attributes"] == {"scores": {"boots": 1.0}}


@pytest.mark.django_db
def test_a_detector_name_with_a_slash_is_refused_by_prediction_store(images):
    with pytest.raises(ValueError, match="contains '/'"):
        prediction_store(detector="org/clip", version="1", records=_records(images[:1]))
    assert Prediction.objects.count() == 0


@pytest.mark.django_db
def test_prediction_store_leaves_existing_predictions_alone(images):
    prediction_store(detector="fake", version="1", records=_records(images[:2], "male"))
    result = prediction_store(detector="fake", version="1", records=_records(images, "female"))
    assert (result.ok, result.failed) == (3, 0)
    verdicts = {p.image_id: p.verdict for p in Prediction.objects.all()}
    assert [verdicts[i.pk] for i in images] == ["male", "male", "female", "female", "female"]


@pytest.mark.django_db
def test_a_new_version_is_a_new_prediction(images):
    prediction_store(detector="fake", version="1", records=_records(images[:1]))
    result = prediction_store(detector="fake", version="2", records=_records(images[:1]))
    assert result.ok == 1
    assert Prediction.objects.count() == 2


@pytest.mark.django_db
def test_the_same_image_twice_in_one_batch_is_stored_once(images):
    result = prediction_store(detector="fake", version="1", records=_records([images[0], images[0]]))
    assert result.ok == 1
    assert Prediction.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_storing_the_same_images_never_duplicate(images):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker(verdict: str) -> None:
        try:
            barrier.wait()
            prediction_store(detector="fake", version="1", records=_records(images, verdict))
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(v,)) for v in ("male", "female", "male", "female")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Prediction.objects.count() == len(images)


@pytest.mark.django_db
def test_shards_partition_the_image_files(images):
    all_ids = set(images_in_scope().values_list("id", flat=True))
    parts = [set(images_in_scope(shard=Shard(i, 2)).values_list("id", flat=True)) for i in (1, 2)]
    assert parts[0] | parts[1] == all_ids
    assert not parts[0] & parts[1]
    assert set(images_in_scope(shard=Shard(1, 1)).values_list("id", flat=True)) == all_ids


def test_shard_text_is_one_based():
    assert Shard.parse("1/4") == Shard(1, 4)
    assert str(Shard.parse("4/4")) == "4/4"
    for bad in ("0/4", "5/4", "a/b", "1", "1/2/3", "-1/2"):
        with pytest.raises(ValueError, match="shard"):
            Shard.parse(bad)


def test_fake_detector_registration_is_undone_afterwards():
    assert "fake" not in registry.DETECTORS
    with registered_fake() as cls:
        detector = registry.get("fake")
        assert isinstance(detector, FakeDetector)
        assert cls is FakeDetector
    assert "fake" not in registry.DETECTORS


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_shows_done_rate_and_eta():
    clock = FakeClock()
    out = io.StringIO()
    meter = Progress(100, stream=out, clock=clock, log_every=0)
    clock.now = 10.0
    meter.advance(25)
    line = out.getvalue().strip()
    assert "25/100 images" in line
    assert "25.0%" in line
    assert "2.50 images/s" in line
    assert "ETA 0:30" in line


def test_progress_writes_to_a_log_at_most_every_log_every_seconds_and_always_the_last_line():
    clock = FakeClock()
    out = io.StringIO()
    meter = Progress(10, stream=out, clock=clock, log_every=10)
    for step in range(10):
        clock.now = float(step + 1)
        meter.advance(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the first update and the final one
    assert "10/10" in lines[-1]


def test_progress_without_any_time_elapsed_has_no_eta():
    meter = Progress(3, stream=io.StringIO(), clock=FakeClock())
    assert meter.eta is None
    assert "ETA ?" in meter.line()


def test_format_duration():
    assert format_duration(0) == "0:00"
    assert format_duration(75) == "1:15"
    assert format_duration(3725) == "1:02:05"


def test_a_detector_box_outside_its_image_is_that_files_failure_with_the_box_named():
    from types import SimpleNamespace

    from detectors.executors.workers import Predicted
    from detectors.services import _record

    detector = cast(Any, SimpleNamespace(key="yolo", output_kind="objects", declared_kind="objects"))
    box = {"class": "cup", "confidence": 0.4, "box": [10.0, 10.0, 40.0, 20.0]}
    outcome = Predicted(kind="objects", output={"objects": [box]}, seconds=0.1)
    record = _record(detector, 7, outcome, size=(32, 32))
    assert record.status == "failed"
    assert record.error == (
        "invalid objects output: objects[0].box: [10, 10, 40, 20] lies outside the 32x32 image"
    )
    assert _record(detector, 7, outcome, size=(64, 64)).status == "ok"
