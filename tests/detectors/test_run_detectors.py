from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from PIL import Image as PILImage

from detectors import registry
from detectors.models import DetectorRun, Prediction, PredictionStatus, RunStatus
from detectors.selectors import Shard, images_pending
from studies.models import ImageRole
from tests.factories import (
    ImageFactory,
    ItemFactory,
    PairItemFactory,
    PromptFactory,
    StudyFactory,
    image_of,
)
from tests.fakes import FakeMeasurer, measurements_for, registered_fake, verdict_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake():
    with registered_fake() as cls:
        yield cls


def run(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("run_detectors", *args, stdout=out, stderr=err)
    return out.getvalue()


@pytest.fixture
def images(study):
    """The files of seven one-image sdxl items of the gender study."""
    prompt = PromptFactory(study=study)
    return [image_of(ItemFactory(prompt=prompt)) for _ in range(7)]


def _pil(image) -> PILImage.Image:
    return PILImage.open(Path(settings.MEDIA_ROOT) / image.file).convert("RGB")


def test_run_stores_one_prediction_per_image_with_the_fake_verdict(fake, images):
    run("--detector", "fake", "--batch-size", "3")
    preds = {p.image_id: p for p in Prediction.objects.filter(detector="fake", version="1")}
    assert set(preds) == {i.pk for i in images}
    for image in images:
        expected = verdict_for(_pil(image))
        assert preds[image.pk].verdict == expected.verdict
        assert preds[image.pk].filter_reason == expected.filter_reason
        assert preds[image.pk].scores == expected.scores
        assert preds[image.pk].seconds is not None
    assert fake.calls == [3, 3, 1]
    detector_run = DetectorRun.objects.get()
    assert detector_run.status == RunStatus.FINISHED
    assert (detector_run.n_total, detector_run.n_done, detector_run.n_failed) == (7, 7, 0)
    assert detector_run.finished_at is not None
    assert detector_run.host
    assert set(Prediction.objects.values_list("run_id", flat=True)) == {detector_run.pk}


def test_second_run_does_nothing_and_says_so(fake, images):
    run("--detector", "fake")
    out = run("--detector", "fake")
    assert "Nothing to do: all 7 images" in out
    assert DetectorRun.objects.count() == 1
    assert Prediction.objects.count() == 7


def test_run_skips_images_already_predicted_and_counts_them(fake, images):
    run("--detector", "fake", "--limit", "2")
    first = DetectorRun.objects.get()
    assert (first.n_total, first.n_done) == (2, 2)
    run("--detector", "fake")
    second = DetectorRun.objects.exclude(pk=first.pk).get()
    assert (second.n_skipped, second.n_total, second.n_done) == (2, 5, 5)
    assert Prediction.objects.count() == 7


def test_filters_by_study_and_t2i_model(fake, images):
    other_study = StudyFactory(slug="other")
    other = image_of(ItemFactory(prompt=PromptFactory(study=other_study), t2i_model="sd3"))
    run("--detector", "fake", "--study", "other")
    assert list(Prediction.objects.values_list("image_id", flat=True)) == [other.pk]
    run("--detector", "fake", "--t2i-model", "sdxl")
    assert Prediction.objects.count() == 8


def test_shards_are_disjoint_and_together_cover_every_image(fake, images):
    for i in (1, 2, 3):
        run("--detector", "fake", "--shard", f"{i}/3")
    runs = DetectorRun.objects.all()
    assert sorted(r.shard for r in runs) == ["1/3", "2/3", "3/3"]
    per_run = [set(r.predictions.values_list("image_id", flat=True)) for r in runs]
    assert sum(len(s) for s in per_run) == 7
    assert set().union(*per_run) == {i.pk for i in images}
    for r, ids in zip(runs, per_run, strict=True):
        shard = Shard.parse(r.shard)
        assert all(pk % 3 == shard.index - 1 for pk in ids)


def test_a_corrupt_file_becomes_a_failed_prediction_not_a_crash(fake, images):
    broken = images[2]
    (Path(settings.MEDIA_ROOT) / broken.file).write_bytes(b"not a png at all")
    missing = images[4]
    (Path(settings.MEDIA_ROOT) / missing.file).unlink()
    run("--detector", "fake", "--batch-size", "4")
    failed = Prediction.objects.filter(status=PredictionStatus.FAILED)
    assert {p.image_id for p in failed} == {broken.pk, missing.pk}
    assert all(p.verdict == "" and "cannot open image" in p.error for p in failed)
    assert Prediction.objects.filter(status=PredictionStatus.OK).count() == 5
    assert DetectorRun.objects.get().n_failed == 2


def test_a_predict_exception_is_retried_one_by_one_and_stored_as_failure(fake, images):
    target = _pil(images[1]).tobytes()
    fake.fail_when = lambda image: image.tobytes() == target
    run("--detector", "fake", "--batch-size", "3")
    failed = Prediction.objects.get(status=PredictionStatus.FAILED)
    assert failed.image_id == images[1].pk
    assert "ValueError: fake detector refuses this image" in failed.error
    assert Prediction.objects.filter(status=PredictionStatus.OK).count() == 6
    # One failing batch of 3, then three retries of one image each.
    assert fake.calls[:4] == [3, 1, 1, 1]


def test_failed_predictions_count_as_done_on_a_rerun(fake, images):
    (Path(settings.MEDIA_ROOT) / images[0].file).write_bytes(b"junk")
    run("--detector", "fake")
    assert "Nothing to do" in run("--detector", "fake")


def test_unknown_detector_is_a_clear_error(db):
    with pytest.raises(CommandError, match=r"Unknown detector 'nope'\. Known detectors: "):
        run("--detector", "nope")


def test_unavailable_detector_fails_the_run_with_its_message(fake, images):
    fake.fail_on_load = "weights missing: set BIASLAB_FAKE_WEIGHTS"
    with pytest.raises(CommandError, match="BIASLAB_FAKE_WEIGHTS"):
        run("--detector", "fake")
    detector_run = DetectorRun.objects.get()
    assert detector_run.status == RunStatus.FAILED
    assert "BIASLAB_FAKE_WEIGHTS" in detector_run.error
    assert Prediction.objects.count() == 0


def test_a_stop_request_ends_the_run_as_interrupted_after_the_current_batch(fake, images):
    from detectors.services import detector_run

    stops = iter([False, False, True])  # asked once the first batch is stored, the second one waiting
    outcome = detector_run(detector=registry.get("fake"), batch_size=2, should_stop=lambda: next(stops, True))
    assert outcome.run.status == RunStatus.INTERRUPTED
    assert Prediction.objects.count() == 2  # the waiting batch is never run (a paid API is not called)
    run("--detector", "fake")  # resumes
    assert Prediction.objects.count() == 7


@pytest.mark.parametrize("bad", ["0/3", "4/3", "1-3", "x/2", "1/0"])
def test_bad_shard_is_rejected(fake, bad):
    with pytest.raises(CommandError, match="shard"):
        run("--detector", "fake", "--shard", bad)


def test_unknown_study_is_rejected(fake, study):
    with pytest.raises(CommandError, match=r"No study with slug 'nope' \(existing studies: gender\)"):
        run("--detector", "fake", "--study", "nope")


def test_pending_selector_excludes_other_versions_only(fake, images):
    run("--detector", "fake")
    assert images_pending(detector="fake", version="1").count() == 0
    assert images_pending(detector="fake", version="2").count() == 7


def test_progress_goes_to_stderr_and_the_summary_to_stdout(fake, images):
    out, err = io.StringIO(), io.StringIO()
    call_command("run_detectors", "--detector", "fake", "--batch-size", "4", stdout=out, stderr=err)
    assert "7/7 images 100.0%" in err.getvalue()
    assert "images/s" in err.getvalue()
    assert "finished: 7 predicted, 0 failed, 0 already done before this run." in out.getvalue()


def test_options_reach_the_detector_typed_and_enter_its_version(images):
    run("--detector", "face_gender", "--option", "face_method=hog", "--option", "face_upsample=1")
    versions = set(Prediction.objects.values_list("version", flat=True))
    assert len(versions) == 1
    assert "dlib-hog-up1-max1024" in versions.pop()
    assert Prediction.objects.count() == 7


def test_an_unknown_option_is_refused_with_the_detectors_options_before_any_run(images):
    with pytest.raises(
        CommandError,
        match=r"face_gender does not take the option\(s\) face_methd; its options: "
        r"face_max_side, face_method, face_upsample\.",
    ):
        run("--detector", "face_gender", "--option", "face_methd=hog")
    assert DetectorRun.objects.count() == 0


def test_a_bad_option_value_names_the_detector_and_the_option(images):
    with pytest.raises(CommandError, match=r"face_gender: face_method must be one of"):
        run("--detector", "face_gender", "--option", "face_method=mediapipe")
    assert DetectorRun.objects.count() == 0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("face_method", "KEY=VALUE"),
        ("=hog", "KEY=VALUE"),
        ("device=cuda", "--device"),
    ],
)
def test_malformed_options_are_refused(fake, bad, message):
    with pytest.raises(CommandError, match=message):
        run("--detector", "fake", "--option", bad)


def test_an_option_given_twice_is_refused(fake):
    with pytest.raises(CommandError, match="given twice"):
        run("--detector", "fake", "--option", "a=1", "--option", "a=2")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", 1),
        ("-2", -2),
        ("0.9", 0.9),
        ("1e-3", 0.001),
        ("True", True),
        ("false", False),
        ("hog", "hog"),
        ("", ""),
        ("/models/x.pt", "/models/x.pt"),
    ],
)
def test_option_values_are_read_as_int_float_bool_or_text(raw, value):
    from detectors.management.commands.run_detectors import option_value

    assert option_value(raw) == value
    assert type(option_value(raw)) is type(value)


def test_help_lists_every_detectors_options():
    from detectors.management.commands.run_detectors import Command

    text = Command().create_parser("manage.py", "run_detectors").format_help()
    assert "--option KEY=VALUE" in text
    for key in registry.available():
        assert f"  {key}: " in text
    assert "face_upsample (clip_enhance, clip_prob, face_age_gender, face_gender, skin_tone)" in text


@pytest.mark.parametrize("key", sorted(registry.DETECTORS))
def test_every_detector_refuses_an_option_it_does_not_take(key):
    from detectors.base import DetectorOptionError

    with pytest.raises(
        DetectorOptionError, match=rf"{key} does not take the option\(s\) no_such_option; its options: "
    ):
        registry.get(key, no_such_option=1)


@pytest.mark.parametrize(
    ("key", "option", "value", "message"),
    [
        ("clip", "batch_size", "x", "clip's option batch_size must be an integer ≥ 1, got 'x'"),
        ("clip_prob", "threshold", -0.1, "clip_prob's option threshold must be a number ≥ 0, got -0.1"),
        ("fairface", "upsample", 1.5, "fairface's option upsample must be an integer ≥ 0, got 1.5"),
        ("facepp", "max_attempts", 0, "facepp's option max_attempts must be an integer ≥ 1, got 0"),
        ("blip2", "max_new_tokens", "many", "blip2's option max_new_tokens must be an integer ≥ 1"),
    ],
)
def test_a_number_option_with_an_unusable_value_is_refused_before_the_run(key, option, value, message):
    from detectors.base import DetectorOptionError

    with pytest.raises(DetectorOptionError, match=message.replace("(", r"\(").replace(".", r"\.")):
        registry.get(key, **{option: value})


def test_the_command_reports_an_unusable_option_value_in_the_detectors_words(images):
    with pytest.raises(CommandError, match=r"^fairface's option max_side must be an integer ≥ 1, got 0\.$"):
        run("--detector", "fairface", "--option", "max_side=0")
    assert DetectorRun.objects.count() == 0


def test_a_mistyped_t2i_model_is_an_error_naming_the_models_not_nothing_to_do(fake, images):
    with pytest.raises(CommandError, match=r"No images of T2I model 'sdxxl'\. T2I models: sdxl\."):
        run("--detector", "fake", "--study", "gender", "--t2i-model", "sdxxl")
    assert not DetectorRun.objects.exists()


# --- image files shared by items, and kinds other than gender ------------------------------------
@pytest.fixture
def pairs(db):
    """A pair-change study: one seed photo shared by three pairs, each with its own edit."""
    pair_study = StudyFactory(slug="pairs", protocol="pair_change")
    seed = ImageFactory()
    prompt = PromptFactory(study=pair_study)
    items = [PairItemFactory(prompt=prompt, image__input=seed) for _ in range(3)]
    return seed, items


def test_a_seed_photo_shared_by_several_pairs_is_predicted_once(fake, pairs):
    seed, items = pairs
    out = run("--detector", "fake", "--study", "pairs")
    edits = {image_of(item, ImageRole.OUTPUT).pk for item in items}
    assert Prediction.objects.filter(image=seed).count() == 1
    assert set(Prediction.objects.values_list("image_id", flat=True)) == edits | {seed.pk}
    detector_run = DetectorRun.objects.get()
    assert (detector_run.n_total, detector_run.n_done) == (4, 4)
    assert sum(fake.calls) == 4
    assert "finished: 4 predicted" in out
    assert "Nothing to do: all 4 images in scope" in run("--detector", "fake", "--study", "pairs")


def test_a_file_in_two_studies_is_predicted_once_and_counts_as_done_in_both(fake, images, study):
    other = StudyFactory(slug="other")
    ItemFactory(prompt=PromptFactory(study=other), image=images[0])
    run("--detector", "fake", "--study", "gender")
    out = run("--detector", "fake", "--study", "other")
    assert out.startswith("Nothing to do: all 1 images in scope")
    assert Prediction.objects.filter(image=images[0]).count() == 1


def test_a_measurements_detector_stores_outputs_of_its_kind(images):
    with registered_fake(FakeMeasurer):
        run("--detector", "fake_measure", "--batch-size", "4")
    predictions = {p.image_id: p for p in Prediction.objects.filter(detector="fake_measure")}
    assert set(predictions) == {i.pk for i in images}
    for image in images:
        prediction = predictions[image.pk]
        assert (prediction.kind, prediction.status, prediction.verdict) == ("measurements", "ok", "")
        assert prediction.output == measurements_for(_pil(image))


def test_an_output_of_another_kind_than_declared_is_stored_as_a_failure(images):
    with registered_fake(FakeMeasurer) as measurer:
        measurer.wrong_kind = True
        run("--detector", "fake_measure")
    failed = Prediction.objects.filter(status=PredictionStatus.FAILED)
    assert failed.count() == 7
    assert all(p.kind == "measurements" and p.output == {} for p in failed)
    assert "fake_measure declares measurements output but returned gender" in failed.first().error
    assert DetectorRun.objects.get().n_failed == 7


def test_a_failure_keeps_the_kind_the_detector_declares(images):
    (Path(settings.MEDIA_ROOT) / images[0].file).write_bytes(b"junk")
    with registered_fake(FakeMeasurer):
        run("--detector", "fake_measure")
    failed = Prediction.objects.get(status=PredictionStatus.FAILED)
    assert (failed.image_id, failed.kind, failed.output) == (images[0].pk, "measurements", {})
    assert "cannot open image" in failed.error


def test_files_of_no_item_are_out_of_scope(fake, images):
    ImageFactory()  # a file no item uses
    run("--detector", "fake")
    assert Prediction.objects.count() == 7


def test_an_empty_study_is_said_to_have_no_images_not_all_0_predicted(fake, db):
    StudyFactory(slug="empty")
    out = run("--detector", "fake", "--study", "empty")
    assert out.startswith("Nothing to do: study 'empty' has no images yet (import them with import_images")
    assert "all 0 images" not in out
    assert not DetectorRun.objects.exists()


def test_no_images_anywhere_is_said_so(fake, db):
    assert run("--detector", "fake").startswith("Nothing to do: no study has images yet")
