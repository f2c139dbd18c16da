"""Writes of the model-output side: storing predictions and running a detector (the import of predictions made
elsewhere: ``detectors.imports``)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from detectors.base import Detector, DetectorOutput, DetectorUnavailable
from detectors.executors import (
    BatchResult,
    Executor,
    ExecutorError,
    InlineExecutor,
    Item,
    ItemError,
    WorkerStats,
    batches_drive,
)
from detectors.executors.workers import AskedImage, DetectorWorker, Predicted, error_text
from detectors.judges.questions import image_question_keys, study_ask
from detectors.kinds import (
    KIND_GENDER,
    KIND_OBJECTS,
    KINDS,
    OutputInvalid,
    objects_inside_image,
    output_validate,
)
from detectors.models import (
    DetectorRun,
    JudgeResponse,
    Prediction,
    PredictionStatus,
    RunStatus,
)
from detectors.remote import detector_executor_start, image_payload
from detectors.selectors import Shard, images_in_scope, images_pending
from studies.models import Image, ItemImage, Study
from studies.progress import Progress

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from detectors.judges import JudgeResponseData

#: The longest detector name a Prediction can hold.
DETECTOR_NAME_MAX = 100


def detector_name_check(name: str) -> None:
    """Raise ValueError unless ``name`` can name a detector: non-empty, at most 100 characters,
    no ``/`` (the report page of a detector, ``reports/detectors/<name>/``, could not be reached)."""
    if not name:
        raise ValueError("detector is empty")
    if len(name) > DETECTOR_NAME_MAX:
        raise ValueError(f"detector name is longer than {DETECTOR_NAME_MAX} characters")
    if "/" in name:
        raise ValueError(f"detector name {name!r} contains '/', which would break report URLs")


# --- storing predictions -----------------------------------------------------------------------
@dataclass(frozen=True)
class PredictionRecord:
    """One prediction of an image file to store: an ok output of ``kind``, or a failure with its
    error (a failure keeps the kind the detector declares, and no output)."""

    image_id: int
    status: str = PredictionStatus.OK
    kind: str = KIND_GENDER
    output: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float | None = None

    @classmethod
    def from_output(cls, image_id: int, output: DetectorOutput, seconds: float | None) -> PredictionRecord:
        return cls(image_id=image_id, kind=output.kind, output=output.as_output(), seconds=seconds)

    @classmethod
    def failure(
        cls, image_id: int, error: str, seconds: float | None = None, kind: str = KIND_GENDER
    ) -> PredictionRecord:
        return cls(image_id=image_id, status=PredictionStatus.FAILED, kind=kind, error=error, seconds=seconds)


@dataclass(frozen=True)
class StoreResult:
    ok: int
    failed: int


def _checked(record: PredictionRecord) -> tuple[str, dict[str, Any], str]:
    """→ (kind, output to store, error) of a record; raises OutputInvalid or ValueError."""
    if record.status == PredictionStatus.OK:
        try:
            return record.kind, output_validate(record.kind, record.output), ""
        except OutputInvalid as exc:
            raise OutputInvalid(exc.field, f"{exc.problem} (image file {record.image_id})") from None
    if record.status != PredictionStatus.FAILED:
        raise ValueError(f"status must be ok or failed, got {record.status!r}")
    if record.kind not in KINDS:
        raise OutputInvalid("kind", f"must be one of {', '.join(KINDS)}, got {record.kind!r}")
    if record.output:
        raise ValueError(f"a failed prediction has no output (image file {record.image_id})")
    return record.kind, {}, record.error or "failed (no error given)"


def prediction_store(
    *, detector: str, version: str, records: Sequence[PredictionRecord], run: DetectorRun | None = None
) -> StoreResult:
    """Store a batch of predictions of image files in one transaction; files predicted already by (detector,
    version) are left alone. An invalid ok output raises OutputInvalid (naming field and file): nothing stored."""
    detector_name_check(detector)
    checked = [_checked(record) for record in records]
    with transaction.atomic():
        existing = set(
            Prediction.objects.filter(
                detector=detector, version=version, image_id__in=[r.image_id for r in records]
            ).values_list("image_id", flat=True)
        )
        rows: dict[int, Prediction] = {}  # by image file: its first record
        for record, (kind, output, error) in zip(records, checked, strict=True):
            if record.image_id not in existing and record.image_id not in rows:
                rows[record.image_id] = Prediction(
                    image_id=record.image_id,
                    detector=detector,
                    version=version,
                    kind=kind,
                    status=record.status,
                    output=output,
                    error=error,
                    seconds=record.seconds,
                    run=run,
                )
        Prediction.objects.bulk_create(rows.values(), ignore_conflicts=True)
    failed = sum(1 for row in rows.values() if row.status == PredictionStatus.FAILED)
    return StoreResult(ok=len(rows) - failed, failed=failed)


# --- detector runs -------------------------------------------------------------------------------
def detector_run_finish(*, run: DetectorRun, status: str, error: str = "") -> DetectorRun:
    """Close a run as finished, interrupted or failed (counters were kept up to date per batch)."""
    run.refresh_from_db()
    run.status = status
    run.error = error
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at", "updated_at"])
    return run


#: Threads decoding the next batch while the detector works on the current one.
DECODE_THREADS = min(4, os.cpu_count() or 1)


def _record(
    detector: Detector,
    image_id: int,
    outcome: Predicted | ItemError,
    *,
    size: tuple[int, int] | None = None,
) -> PredictionRecord:
    """A worker's outcome for one image file as the row to store: an output of another kind than
    declared, or one that breaks its kind's schema, is that file's failure, never the batch's."""
    declared = detector.declared_kind
    if isinstance(outcome, ItemError):
        error = outcome.message
    elif outcome.kind != declared:
        error = f"{detector.key} declares {declared} output but returned {outcome.kind}"
    else:
        try:
            output = output_validate(outcome.kind, outcome.output)
            if size is not None and outcome.kind == KIND_OBJECTS:
                objects_inside_image(output, *size)
            return PredictionRecord(
                image_id=image_id, kind=outcome.kind, output=output, seconds=outcome.seconds
            )
        except OutputInvalid as exc:
            error = f"invalid {declared} output: {exc}"
    return PredictionRecord.failure(image_id, error, outcome.seconds, declared)


@dataclass
class RunOutcome:
    """What ``detector_run`` did; ``run`` is None when there was nothing to do."""

    run: DetectorRun | None
    version: str
    n_in_scope: int
    message: str
    #: Per-worker figures of an ``--executor ray`` run (empty for a local run).
    workers: list[WorkerStats] = field(default_factory=list)


def _nothing_to_do(in_scope: int, *, study: Study | None, shard: Shard | None, done: str) -> str:
    """Why a run has nothing to do: every image in scope is predicted, or there is no image at
    all — "all 0 images already have a prediction" would hide an empty study."""
    if in_scope:
        return f"Nothing to do: all {in_scope} images in scope already have a {done} prediction."
    if study is not None and not ItemImage.objects.filter(item__study=study).exists():
        return (
            f"Nothing to do: study '{study.slug}' has no images yet "
            "(import them with import_images, or make them with generate_images)."
        )
    if study is None and not ItemImage.objects.exists():
        return "Nothing to do: no study has images yet (import them with import_images)."
    if shard is not None:
        return f"Nothing to do: shard {shard} holds no images."
    return "Nothing to do: no images in scope."


def detector_run(
    *,
    detector: Detector,
    study: Study | None = None,
    t2i_model: str = "",
    shard: Shard | None = None,
    batch_size: int = 8,
    limit: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], Progress] | None = None,
    executor: Executor | None = None,
    send_images: bool = False,
) -> RunOutcome:
    """Predict every image file in scope (``study``, ``t2i_model``, ``shard``; a file once) that has no
    prediction for (detector, version_id), in batches by id, each stored with the run's counters. Nothing
    pending: no run row. DetectorUnavailable: the run stored as failed, then re-raised."""
    detector_name_check(detector.key)
    if executor is not None and detector.in_process_only:
        raise ExecutorError(
            f"{detector.key} sends its requests from this process and keeps their cache here: run it "
            "without --executor (its concurrency option sets how many requests are in flight)."
        )
    if detector.needs_questions:  # a judge: its kind and version follow the study's questions
        detector.questions_bind(study_ask(study, judge=detector.key))  # type: ignore[attr-defined]
    version = detector.version_id
    in_scope = images_in_scope(study=study, t2i_model=t2i_model, shard=shard).count()
    pending = images_pending(
        detector=detector.key, version=version, study=study, t2i_model=t2i_model, shard=shard
    )
    n_pending = pending.count()
    if n_pending == 0:
        return RunOutcome(
            run=None,
            version=version,
            n_in_scope=in_scope,
            message=_nothing_to_do(in_scope, study=study, shard=shard, done=f"{detector.key}@{version}"),
        )
    n_total = min(n_pending, limit) if limit else n_pending
    run = DetectorRun.objects.create(
        study=study,
        detector=detector.key,
        version=version,
        t2i_model=t2i_model,
        shard=str(shard) if shard else "",
        device=detector.device,
        batch_size=batch_size,
        host=socket.gethostname()[:200],
        status=RunStatus.RUNNING,
        n_total=n_total,
        n_skipped=in_scope - n_pending,
    )
    try:
        if executor is None:  # the detector runs in this thread, as loaded here
            detector.ensure_loaded()
            worker = DetectorWorker(detector_class="", options={})
            worker.detector = detector
            runner: Executor = InlineExecutor(worker, threads=DECODE_THREADS)
        else:  # --executor ray: the workers load the detector; this process never does
            detector_executor_start(executor=executor, detector=detector)
            runner = executor
    except BaseException as exc:  # unavailable weights, or workers that cannot be had
        error = str(exc) if isinstance(exc, DetectorUnavailable) else error_text(exc)
        detector_run_finish(run=run, status=RunStatus.FAILED, error=error)
        raise
    meter = progress(n_total) if progress else None
    try:
        with runner if executor is None else nullcontext(runner):
            status = _run_batches(
                executor=runner,
                run=run,
                detector=detector,
                study=study,
                pending=pending,
                batch_size=batch_size,
                n_total=n_total,
                should_stop=should_stop,
                meter=meter,
                send_images=send_images,
                wall_clock=executor is not None,
            )
    except BaseException as exc:  # a crash (or a second Ctrl-C) must not leave a "running" row
        detector_run_finish(run=run, status=RunStatus.FAILED, error=error_text(exc))
        raise
    finally:
        if meter:
            meter.close()
    run = detector_run_finish(run=run, status=status)
    return RunOutcome(
        run=run,
        version=version,
        n_in_scope=in_scope,
        message=f"{run.status}: {run.n_done} predicted, {run.n_failed} failed, "
        f"{run.n_skipped} already done before this run.",
        workers=executor.stats() if executor is not None else [],
    )


def _run_batches(
    *,
    executor: Executor,
    detector: Detector,
    study: Study | None,
    run: DetectorRun,
    pending: QuerySet[Image],
    batch_size: int,
    n_total: int,
    should_stop: Callable[[], bool],
    meter: Progress | None,
    send_images: bool = False,
    wall_clock: bool = True,
) -> str:
    """Predict ``pending`` (at most ``n_total`` files) on the executor's workers, each output checked and
    validated here before it is stored (``_record``); → run status."""
    media = Path(settings.MEDIA_ROOT).resolve()
    state = {"stored": 0, "clock": time.perf_counter()}
    # (width, height) of the files in flight: an objects box is checked against its image here.
    sizes: dict[int, tuple[int, int]] = {}

    def batches() -> Iterator[list[Item]]:
        # At most n_total files, by id: keyset pagination over the live pending set (restart-safe,
        # never overlapping).
        fetched, last_id = 0, 0
        while fetched < n_total:
            size = min(batch_size, n_total - fetched)
            images = list(pending.filter(id__gt=last_id).only("id", "file", "width", "height")[:size])
            if not images:
                return
            last_id = images[-1].pk
            fetched += len(images)
            sizes.update((image.pk, (image.width, image.height)) for image in images)
            payloads: list[Any] = [image_payload(media / image.file, send_images) for image in images]
            if detector.needs_questions and study is not None:  # a judge: with its questions' keys
                asked = image_question_keys(study, [image.pk for image in images])
                payloads = [AskedImage(p, asked.get(i.pk, ())) for i, p in zip(images, payloads, strict=True)]
            yield [(image.pk, payload) for image, payload in zip(images, payloads, strict=True)]

    def store(result: BatchResult) -> None:
        # cast: an executor hands back the keys it was given, here image ids (``batches``).
        records = [
            _record(detector, cast(int, key), output, size=sizes.pop(cast(int, key), None))
            for key, output in zip(result.keys, result.outputs, strict=True)
        ]
        # Wall time on a pool of workers (its images/s is the whole pool's), else the detector's own.
        now = time.perf_counter()
        seconds = now - state["clock"] if wall_clock else result.seconds
        batch_store(run=run, records=records, seconds=seconds, usage=detector.usage_take())
        state["clock"] = now
        state["stored"] += len(records)
        if meter:
            meter.advance(len(records))

    exhausted = batches_drive(executor, batches(), store, should_stop=should_stop)
    if exhausted or state["stored"] >= n_total:
        return RunStatus.FINISHED
    return RunStatus.INTERRUPTED


#: The run's counters a detector's ``usage_take`` may advance.
USAGE_COUNTERS = ("requests", "cache_hits", "prompt_tokens", "completion_tokens")


def batch_store(
    *,
    run: DetectorRun,
    records: Sequence[PredictionRecord],
    seconds: float,
    usage: dict[str, float] | None = None,
) -> StoreResult:
    """Store one batch's predictions and advance the run's counters, in one transaction."""
    spent: dict[str, Any] = {
        name: F(name) + int(usage[name]) for name in USAGE_COUNTERS if usage and usage.get(name)
    }
    if usage and usage.get("cost_usd") is not None:
        spent["cost_usd"] = Coalesce(F("cost_usd"), Value(0.0)) + float(usage["cost_usd"])
    with transaction.atomic():
        stored = prediction_store(detector=run.detector, version=run.version, records=records, run=run)
        DetectorRun.objects.filter(pk=run.pk).update(
            n_done=F("n_done") + stored.ok,
            n_failed=F("n_failed") + stored.failed,
            seconds=F("seconds") + seconds,
            updated_at=timezone.now(),
            **spent,
        )
    return stored


def judge_responses_store(*, responses: dict[str, tuple[str, str, JudgeResponseData]], model: str) -> int:
    """Cache a judge server's answers: key → (image sha256, question text, answer). A key
    already cached (another worker asked too) is left alone. Returns the rows written."""
    rows = [
        JudgeResponse(
            key=key,
            image_sha256=image_sha256,
            model=model[:200],
            question=question,
            mode=data.mode,
            content=data.content,
            probabilities=data.probabilities,
            prompt_tokens=data.prompt_tokens,
            completion_tokens=data.completion_tokens,
        )
        for key, (image_sha256, question, data) in responses.items()
    ]
    return len(JudgeResponse.objects.bulk_create(rows, ignore_conflicts=True))
