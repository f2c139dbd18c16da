"""The driver's side of a run on an executor (``--executor ray``), shared by every long command."""

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
    """Start the workers and check they load the version this process will store under. A worker node with
    other packages or other weights would otherwise store its predictions under this process's version string.
    Raises the worker's DetectorUnavailable, or ExecutorError for a version mismatch."""
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
    """``generation.generation.batches_run`` on a started executor: returns (jobs handled, seconds)."""
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
