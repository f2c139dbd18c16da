"""The driver's side of a run on an executor (``--executor ray``), shared by every long command.

The workers (detectors/executors/workers.py, generation/workers.py) hold the model and see only
plain data; the command's process selects the work from the database, turns it into batches of
``(key, payload)`` items, and stores every result with the same idempotent writes as a local
run — ``detectors.services`` for predictions (one row per image file, detector and version; a
conflict is skipped), ``generation.generation`` and ``generation.editing`` for images (one item
per study and key, through ``studies.imports.images.item_image_store``). Work a dead worker had in hand
was never written, so giving it to another worker cannot duplicate anything.

This module holds what those drivers share and nothing of theirs: how a detector's workers are
built and checked, an image sent as a path or as bytes, and ``batches_run_remote``, the loop
over a list of jobs. It imports neither ``detectors.services`` nor the generation app, which
both import it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from detectors.executors import BatchResult, Executor, ExecutorError, WorkerSpec, batches_drive
from detectors.executors.workers import ImageBytes

if TYPE_CHECKING:
    from detectors.base import Detector
    from detectors.progress import Progress


# --- run_detectors ---------------------------------------------------------------------------------
def detector_worker_spec(detector: Detector) -> WorkerSpec:
    """How a worker rebuilds ``detector``: its class's dotted path, its options and device (and
    a judge's ``StudyAsk``)."""
    cls = type(detector)
    kwargs: dict[str, Any] = {
        "detector_class": f"{cls.__module__}.{cls.__qualname__}",
        "options": dict(detector.options),
        "device": detector.device,
    }
    if detector.needs_questions:  # a judge: the study's questions it was bound to (plain data)
        kwargs["ask"] = getattr(detector, "ask", None)
    return WorkerSpec(factory="detectors.executors.workers.DetectorWorker", kwargs=kwargs, label=detector.key)


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


# --- any list of jobs (generate_images, edit_images) ------------------------------------------
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
    """``generation.generation.batches_run`` on a started executor: returns (jobs handled, seconds).

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
