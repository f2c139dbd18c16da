"""The driver's side of a detector run on an executor (``--executor ray``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors.executors import Executor, ExecutorError, WorkerSpec
from detectors.executors.workers import ImageBytes

if TYPE_CHECKING:
    from detectors.base import Detector


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
    """Start the workers and check they load the version this process will store under."""
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
