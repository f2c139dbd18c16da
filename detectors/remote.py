"""The driver's side of a run on an executor (``--executor ray``): read, hand out, store.

The workers (detectors/executors/workers.py) hold the model and see only plain data; this
module, in the command's process, selects the work from the database, turns it into batches of
``(key, payload)`` items, and stores every result with the same idempotent writes as a local
run — ``services.batch_store`` (one row per image file, detector and version; a conflict is
skipped), ``generation._Storer`` and ``editing._PairStorer`` (one item per study and key, through
``studies.ingest.item_image_store``). Work a dead worker had in hand was
never written, so giving it to another worker cannot duplicate anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings as django_settings

from detectors.executors import BatchResult, Executor, ExecutorError, Item, WorkerSpec, batches_drive
from detectors.executors.workers import ImageBytes
from detectors.models import RunStatus

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from detectors.base import Detector
    from detectors.edit_pipeline import EditSettings
    from detectors.generation import ModelSource, Settings
    from detectors.models import DetectorRun
    from detectors.progress import Progress
    from studies.models import Image


# --- run_detectors ---------------------------------------------------------------------------------
def detector_worker_spec(detector: Detector) -> WorkerSpec:
    """How a worker rebuilds ``detector``: its class's dotted path, its options and device."""
    cls = type(detector)
    return WorkerSpec(
        factory="detectors.executors.workers.DetectorWorker",
        kwargs={
            "detector_class": f"{cls.__module__}.{cls.__qualname__}",
            "options": dict(detector.options),
            "device": detector.device,
        },
        label=detector.key,
    )


def detector_executor_start(*, executor: Executor, detector: Detector) -> None:
    """Start the workers and check they load the version this process will store under.

    A worker node with other packages or other weights would otherwise store its predictions
    under this process's version string. Raises the worker's DetectorUnavailable, or
    ExecutorError for a version mismatch.
    """
    info = executor.start(detector_worker_spec(detector))
    if info.get("version") != detector.version_id:
        raise ExecutorError(
            f"The workers load {detector.key}@{info.get('version')} but this process would store "
            f"{detector.key}@{detector.version_id}: give the workers the same packages, weights and "
            "BIASLAB_* settings."
        )


def image_payload(path: Path, send_images: bool) -> str | ImageBytes:
    """The path for workers that share MEDIA_ROOT, else the bytes (``--send-images``). An
    unreadable file is sent as its path, so the worker's open fails with the file's own error."""
    if send_images:
        try:
            return ImageBytes(str(path), path.read_bytes())
        except OSError:
            pass
    return str(path)


def detector_batches_remote(
    *,
    executor: Executor,
    detector: Detector,
    run: DetectorRun,
    pending: QuerySet[Image],
    batch_size: int,
    n_total: int,
    should_stop: Callable[[], bool],
    meter: Progress | None,
    send_images: bool = False,
) -> str:
    """Predict ``pending`` (at most ``n_total`` image files, each once) on the executor's
    workers; → run status. Every output is checked against ``detector``'s declared kind and
    validated here before it is stored (``services._record``); a failure is stored with its error.

    Batches are taken by keyset pagination over the live pending set, as the local loop does:
    the batches in flight hold ids up to the last one fetched, so the next fetch cannot overlap
    them. The run's ``seconds`` grows by the wall time between stored batches, so its images/s
    is the whole pool's throughput.
    """
    from detectors.services import _record, batch_store

    media = Path(django_settings.MEDIA_ROOT).resolve()
    state = {"fetched": 0, "stored": 0, "last_id": 0, "clock": time.perf_counter()}
    # (width, height) of the files in flight: an objects box is checked against its image here.
    sizes: dict[int, tuple[int, int]] = {}

    def batches() -> Iterator[list[Item]]:
        while state["fetched"] < n_total:
            size = min(batch_size, n_total - state["fetched"])
            images = list(
                pending.filter(id__gt=state["last_id"]).only("id", "file", "width", "height")[:size]
            )
            if not images:
                return
            sizes.update((image.pk, (image.width, image.height)) for image in images)
            state["last_id"] = images[-1].pk
            state["fetched"] += len(images)
            yield [(image.pk, image_payload(media / image.file, send_images)) for image in images]

    def store(result: BatchResult) -> None:
        # cast: an executor hands back the keys it was given, here image ids (``batches``).
        records = [
            _record(detector, cast(int, key), output, size=sizes.pop(cast(int, key), None))
            for key, output in zip(result.keys, result.outputs, strict=True)
        ]
        now = time.perf_counter()
        batch_store(run=run, records=records, seconds=now - state["clock"])
        state["clock"] = now
        state["stored"] += len(records)
        if meter:
            meter.advance(len(records))

    exhausted = batches_drive(executor, batches(), store, should_stop=should_stop)
    if exhausted or state["stored"] >= n_total:
        return RunStatus.FINISHED
    return RunStatus.INTERRUPTED


# --- generate_images and edit_images -----------------------------------------------------------
def generation_worker_spec(model: ModelSource, settings: Settings) -> WorkerSpec:
    """How a worker loads the pipeline: the model's source and the generation settings."""
    return _pipeline_worker_spec("GenerationWorker", model, settings)


def edit_worker_spec(model: ModelSource, settings: EditSettings) -> WorkerSpec:
    """How a worker loads the editor: the model's source and the edit settings."""
    return _pipeline_worker_spec("EditWorker", model, settings)


def _pipeline_worker_spec(worker: str, model: ModelSource, settings: Settings | EditSettings) -> WorkerSpec:
    from dataclasses import asdict

    return WorkerSpec(
        factory=f"detectors.executors.workers.{worker}",
        kwargs={"model": asdict(model), "settings": asdict(settings)},
        label=model.name,
    )


def batches_run_remote(
    executor: Executor,
    jobs: Sequence[Any],
    *,
    batch_size: int,
    store: Callable[[Any, Any], None],
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], Progress] | None = None,
    payload: Callable[[Any], Any] | None = None,
) -> tuple[int, float]:
    """``generation.batches_run`` on a started executor: returns (jobs handled, seconds).

    The jobs go out in batches of ``batch_size``, as many in flight as the executor keeps busy,
    each as ``payload(job)`` when given (plain data for a job that holds database rows, as an
    edit's seed photo does; the job itself otherwise);
    ``store(job, output)`` is called in this thread for every job of each batch that comes back
    (a worker's output, or the ``ItemError`` of a job whose worker died on it alone). Each job's
    seed fixes its image whatever worker draws it, so the stored images are a local run's.
    ``should_stop`` stops handing out batches; those in flight are still stored.
    """
    meter = progress(len(jobs)) if progress else None
    size = max(1, batch_size)
    to_payload = payload or (lambda job: job)
    batches = (
        [(index, to_payload(jobs[index])) for index in range(start, min(start + size, len(jobs)))]
        for start in range(0, len(jobs), size)
    )
    handled = 0

    def on_result(result: BatchResult) -> None:
        nonlocal handled
        for index, output in zip(result.keys, result.outputs, strict=True):
            # cast: an executor hands back the keys it was given, here job indexes (``batches``).
            store(jobs[cast(int, index)], output)
        handled += len(result.keys)
        if meter:
            meter.advance(len(result.keys))

    started = time.perf_counter()
    try:
        batches_drive(executor, batches, on_result, should_stop=should_stop)
    finally:
        if meter:
            meter.close()
    return handled, time.perf_counter() - started
