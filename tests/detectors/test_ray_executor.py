"""``--executor ray`` on a local Ray (one per test session, ``ray_cluster``): the workers hold the
model, the driver alone writes, and what ends up stored is what a local run stores.

Every Ray test is marked ``ray`` and skips, saying why, where Ray is not installed.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from PIL import Image as PILImage

from detectors import registry, services
from detectors.executors.ray_executor import RayExecutor
from detectors.models import DetectorRun, Prediction, PredictionStatus, RunStatus
from studies.models import Image, Item
from tests.factories import ItemFactory, PromptFactory, StudyFactory, image_of
from tests.fakes import (
    CrashingFakeDetector,
    DatabaseProbeDetector,
    FussyFakeDetector,
    WhereVersionFakeDetector,
    WorkerlessWeightsFakeDetector,
    mean_pixel,
    registered,
    registered_fake,
    save_tiny_sd,
    verdict_for,
)

pytestmark = [pytest.mark.django_db, pytest.mark.ray]

#: What must be equal between two runs (not the run, the time taken or the row's own id).
COMPARED = ("image_id", "detector", "version", "kind", "status", "output", "error")


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("run_detectors", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def stored() -> list[tuple]:
    return sorted(Prediction.objects.values_list(*COMPARED), key=repr)


def _pixels(image: Image) -> np.ndarray:
    return np.asarray(_pil(image), dtype=np.int16)


def _pil(image: Image) -> PILImage.Image:
    return PILImage.open(Path(settings.MEDIA_ROOT) / image.file).convert("RGB")


@pytest.fixture
def images(study) -> list[Image]:
    """The files of twelve one-image items of mixed verdicts, one corrupt file and one missing
    file among them."""
    prompt = PromptFactory(study=study)
    made = [image_of(ItemFactory(prompt=prompt)) for _ in range(12)]
    (Path(settings.MEDIA_ROOT) / made[3].file).write_bytes(b"not a png at all")
    (Path(settings.MEDIA_ROOT) / made[8].file).unlink()
    return made


@pytest.fixture
def store_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every image id handed to the database write, in order (the driver's only write)."""
    seen: list[int] = []
    real = services.batch_store

    def spy(*, records, **kwargs):
        seen.extend(record.image_id for record in records)
        return real(records=records, **kwargs)

    monkeypatch.setattr(services, "batch_store", spy)
    return seen


def test_a_ray_run_stores_exactly_the_predictions_a_local_run_stores(ray_cluster, study, images, store_spy):
    ItemFactory(prompt=PromptFactory(study=study), image=images[0])  # a file two items share
    with registered(FussyFakeDetector):
        run("--detector", "fake_fussy", "--batch-size", "4")
        local = stored()
        assert {row[4] for row in local} == {"ok", "failed"}  # verdicts and failures both compared
        Prediction.objects.all().delete()
        DetectorRun.objects.all().delete()
        store_spy.clear()

        out, err = run(
            "--detector", "fake_fussy", "--batch-size", "3", "--executor", "ray",
            "--num-workers", "2", "--num-gpus-per-worker", "1",
        )  # fmt: skip

    assert stored() == local
    # Each file once, the one two items share included.
    assert sorted(store_spy) == sorted(image.pk for image in images)
    assert Prediction.objects.filter(image=images[0]).count() == 1
    detector_run = DetectorRun.objects.get()
    assert detector_run.status == RunStatus.FINISHED
    assert (detector_run.n_done + detector_run.n_failed, detector_run.seconds > 0) == (12, True)
    assert "12/12 images 100.0%" in err
    assert "finished: " in out
    workers = [line for line in out.splitlines() if line.startswith("  worker ")]
    assert len(workers) == 2
    # Each worker reserved one of the two declared GPUs; Ray told each which one it got.
    assert sorted(line.split(" GPU ")[1].split(":")[0] for line in workers) == ["0", "1"]
    assert all("images/s busy" in line for line in workers)
    # The failures are the workers' own words: unreadable files, and the bright images the
    # fussy fake refuses (found by retrying its failing batches image by image in the worker).
    failed = {p.image_id: p.error for p in Prediction.objects.filter(status=PredictionStatus.FAILED)}
    assert "cannot open image: UnidentifiedImageError" in failed.pop(images[3].pk)
    assert "No such file or directory" in failed.pop(images[8].pk)
    readable = [i for i in images if i.pk not in (images[3].pk, images[8].pk)]
    assert set(failed) == {i.pk for i in readable if mean_pixel(_pil(i)) >= 170}
    assert set(failed.values()) == {"ValueError: fake detector refuses bright images"}


def test_a_restarted_ray_run_predicts_only_what_is_missing_and_a_second_one_nothing(
    ray_cluster, images, store_spy, monkeypatch
):
    with registered_fake():
        run("--detector", "fake", "--limit", "5")  # an earlier run got this far, then stopped
        store_spy.clear()
        run("--detector", "fake", "--executor", "ray", "--num-workers", "2", "--batch-size", "2")
        assert len(store_spy) == 7
        assert Prediction.objects.count() == 12
        second = DetectorRun.objects.order_by("-id").first()
        assert (second.n_skipped, second.n_total, second.n_done + second.n_failed) == (5, 7, 7)

        starts: list[object] = []
        monkeypatch.setattr(RayExecutor, "start", lambda self, spec: starts.append(spec))
        out, _ = run("--detector", "fake", "--executor", "ray", "--num-workers", "2")
    assert out.startswith("Nothing to do: all 12 images in scope already have a fake@1 prediction.")
    assert starts == []  # no worker was even started
    assert DetectorRun.objects.count() == 2
    assert Prediction.objects.count() == 12


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(ray_cluster, images, store_spy, tmp_path):
    marker = tmp_path / "crashed"
    with registered(CrashingFakeDetector):
        out, err = run(
            "--detector", "fake_crash", "--batch-size", "2", "--executor", "ray", "--num-workers", "2",
            "--option", f"crash_marker={marker}", "--option", "crash_on_call=2",
        )  # fmt: skip
    assert marker.exists()  # a worker really died, on its second batch
    assert "Ray worker 1 died" in err or "Ray worker 2 died" in err
    assert "worker 3 replaces it" in err
    assert sorted(store_spy) == sorted(image.pk for image in images)  # nothing lost, nothing twice
    readable = [i for i in images if i.pk not in (images[3].pk, images[8].pk)]
    for image in readable:
        prediction = Prediction.objects.get(image=image)
        assert (prediction.status, prediction.verdict) == ("ok", verdict_for(_pil(image)).verdict)
    detector_run = DetectorRun.objects.get()
    assert (detector_run.status, detector_run.n_done, detector_run.n_failed) == (RunStatus.FINISHED, 10, 2)
    workers = [line for line in out.splitlines() if line.startswith("  worker ")]
    assert len(workers) == 3  # two, and the one that replaced the dead one
    assert sum("died with" in line for line in workers) == 1


def test_an_image_that_kills_every_worker_is_stored_as_its_failure_and_the_rest_predicted(
    ray_cluster, images, store_spy
):
    readable = [i for i in images if i.pk not in (images[3].pk, images[8].pk)]
    means = [round(mean_pixel(_pil(i)), 3) for i in readable]
    # The detector knows the poison by its mean pixel, which no other readable file may share.
    # The files' colours follow the factories' sequence, which depends on the tests run before
    # in the same process: in some orders two files share a mean. So the poison is the first
    # file of the second batch of 4 (images 4-7) whose mean is its own.
    poison = next(images[n] for n in (5, 6, 7, 4) if means.count(round(mean_pixel(_pil(images[n])), 3)) == 1)
    poison_mean = round(mean_pixel(_pil(poison)), 3)
    with registered(CrashingFakeDetector), RayExecutor(num_workers=1, max_attempts=2) as executor:
        outcome = services.detector_run(
            detector=registry.get("fake_crash", poison_mean=poison_mean), batch_size=4, executor=executor
        )
    assert sorted(store_spy) == sorted(image.pk for image in images)
    failed = Prediction.objects.get(image=poison)
    assert failed.status == PredictionStatus.FAILED
    assert failed.error.startswith("worker died on this item (2 attempts, the last alone)")
    assert Prediction.objects.filter(status=PredictionStatus.OK).count() == 9
    assert outcome.run.status == RunStatus.FINISHED
    # Its batch of 4 killed two workers, then the image alone killed a third; the last one
    # finished. (One more dies when the first worker's previous reply dies with it: that batch
    # is then retried alone first — see test_executors.py.)
    alive = [worker.alive for worker in outcome.workers]
    assert alive in ([False] * 3 + [True], [False] * 4 + [True])


def test_workers_cannot_reach_the_database_the_driver_can(ray_cluster, study):
    ItemFactory(prompt=PromptFactory(study=study))
    with registered(DatabaseProbeDetector):
        run("--detector", "fake_db_probe")
        local = Prediction.objects.get()
        assert local.output["detail"] == "database reached (1 images)"  # the probe does see a database
        Prediction.objects.all().delete()
        run("--detector", "fake_db_probe", "--executor", "ray", "--num-workers", "1")
    remote = Prediction.objects.get()
    assert remote.verdict == "filtered"
    detail = remote.output["detail"]
    assert detail.startswith("no database: ")
    assert "settings are not configured" in detail or "Apps aren't loaded" in detail


def test_workers_that_load_another_version_stop_the_run_before_any_batch(ray_cluster, images):
    with (
        registered(WhereVersionFakeDetector),
        pytest.raises(CommandError, match="The workers load fake_where@1\\+no-django"),
    ):
        run("--detector", "fake_where", "--executor", "ray", "--num-workers", "1")
    detector_run = DetectorRun.objects.get()
    assert detector_run.status == RunStatus.FAILED
    assert "this process would store fake_where@1+django" in detector_run.error
    assert not Prediction.objects.exists()


def test_weights_missing_on_the_workers_fail_the_run_with_their_message(ray_cluster, images):
    with (
        registered(WorkerlessWeightsFakeDetector),
        pytest.raises(
            CommandError, match=r"^fake_no_weights is unavailable: set BIASLAB_FAKE_WEIGHTS on the workers$"
        ),
    ):
        run("--detector", "fake_no_weights", "--executor", "ray", "--num-workers", "1")
    detector_run = DetectorRun.objects.get()
    assert (detector_run.status, detector_run.error) == (
        RunStatus.FAILED,
        "set BIASLAB_FAKE_WEIGHTS on the workers",
    )


def test_too_few_gpus_in_the_cluster_is_a_clear_error(ray_cluster, images):
    with registered_fake(), pytest.raises(CommandError, match=r"3 x 1 GPU need 3; the cluster has 2"):
        run("--detector", "fake", "--executor", "ray", "--num-workers", "3", "--num-gpus-per-worker", "1")
    assert DetectorRun.objects.get().status == RunStatus.FAILED


def test_send_images_ships_bytes_and_stores_the_same(ray_cluster, images):
    with registered_fake():
        run("--detector", "fake")
        local = stored()
        Prediction.objects.all().delete()
        run("--detector", "fake", "--executor", "ray", "--num-workers", "1", "--send-images")
    assert stored() == local


def test_ray_generation_stores_the_images_a_local_generation_stores(ray_cluster, tmp_path):
    pytest.importorskip("diffusers")
    model = save_tiny_sd(tmp_path / "tiny-sd")
    prompts = tmp_path / "prompts.csv"
    # Two prompts of one template under --seed-by template: the seed policy and the prompt
    # set's extra column (metadata) must come through the Ray path as through the local one.
    prompts.write_text(
        "category,word,prompt,template\nprofession,lawyer,a lawyer,job\nprofession,nurse,a nurse,job\n"
    )
    small = (
        "--steps", "2", "--height", "64", "--width", "64", "--per-prompt", "2", "--batch-size", "2",
        "--seed-by", "template",
    )  # fmt: skip
    StudyFactory(slug="local")
    StudyFactory(slug="remote")
    for slug, extra in (("local", ()), ("remote", ("--executor", "ray", "--num-workers", "1"))):
        out = io.StringIO()
        call_command(
            "generate_images", "--t2i-model", str(model), "--prompt-set", str(prompts), "--study", slug,
            *small, *extra, stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
        assert f"Done: 4 images of tiny-sd stored in study {slug}" in out.getvalue()

    def images_of(slug: str) -> dict[str, tuple]:
        rows = Item.objects.filter(study__slug=slug).select_related("prompt")
        return {
            item.key: (
                (item.seed, item.index, item.params, item.metadata, item.prompt.text),
                _pixels(image_of(item)),
            )
            for item in rows
        }

    local, remote = images_of("local"), images_of("remote")
    assert sorted(remote) == sorted(local)
    assert {fields[3]["template"] for fields, _ in remote.values()} == {"job"}
    assert {fields[2]["seed_by"] for fields, _ in remote.values()} == {"template"}
    # Template seeds: image i of the lawyer and of the nurse share their seed.
    assert len({fields[0] for fields, _ in remote.values()}) == 2
    for path, (fields, pixels) in remote.items():
        assert fields == local[path][0]
        # Same seed, same image — up to float rounding: a Ray worker runs torch on the threads
        # its CPU share allows, and another summation order can move a pixel by one step.
        assert np.abs(pixels - local[path][1]).max() <= 2
    assert "worker 1" in out.getvalue()
