"""Writes of the model-output side: storing predictions, running a detector, importing predictions.

Predictions belong to image files (``studies.Image``): one row per (file, detector, version),
whatever the number of items using the file. Every write validates the output against its
kind's schema (``detectors.kinds``) before anything is stored.

``detector_run`` is the restartable loop behind ``run_detectors``: it selects the files of the
items in scope that have no prediction for (detector, version), predicts them in batches and
stores each batch — predictions plus the run's counters — in one transaction. The unique
constraint on (image, detector, version) backs it, so two workers that overlap by mistake never
store a duplicate.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pickle
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from PIL import Image as PILImage

from detectors.base import Detector, DetectorOutput, DetectorUnavailable
from detectors.executors import (
    BatchResult,
    Executor,
    ExecutorError,
    Item,
    ItemError,
    WorkerStats,
    batches_drive,
)
from detectors.executors.workers import AskedImage, Predicted, image_open, outputs_predict
from detectors.judges.questions import image_question_keys, study_ask
from detectors.kinds import (
    KINDS,
    STUDY_CHECKS,
    OutputInvalid,
    objects_inside_image,
    output_fits_questions,
    output_validate,
    validate_gender,
)
from detectors.models import (
    DetectorRun,
    FilterReason,
    JudgeResponse,
    OutputKind,
    Prediction,
    PredictionStatus,
    RunStatus,
)
from detectors.progress import Progress
from detectors.remote import detector_executor_start, image_payload
from detectors.selectors import Shard, images_in_scope, images_pending
from studies.batching import batches, import_batch_rows, in_chunks, is_in, rows_insert
from studies.csvio import read_cell
from studies.jsonbounds import JSONOutOfBounds, json_loads_bounded
from studies.models import Image, ItemImage, Question, Study
from studies.models import Item as StudyItem  # ``Item`` here is an executor's work item

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
    kind: str = OutputKind.GENDER
    output: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float | None = None

    @classmethod
    def from_output(cls, image_id: int, output: DetectorOutput, seconds: float | None) -> PredictionRecord:
        return cls(image_id=image_id, kind=output.kind, output=output.as_output(), seconds=seconds)

    @classmethod
    def failure(
        cls, image_id: int, error: str, seconds: float | None = None, kind: str = OutputKind.GENDER
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
    """Store a batch of predictions of image files in one transaction; files already predicted
    by (detector, version) are left alone.

    Every ok output is validated against its kind first: an invalid one raises OutputInvalid
    (a ValueError naming the field and the file) and nothing of the batch is stored; so does a
    detector name with ``/``. Returns how many ok and failed rows this call created. Conflicts
    on (image, detector, version) are ignored at the database, so a concurrent worker that stored
    the same file a moment earlier wins and nothing is duplicated (the counts then include that
    file once more than they should — only possible when two workers were given overlapping work).
    """
    detector_name_check(detector)
    checked = [_checked(record) for record in records]
    with transaction.atomic():
        existing = set(
            Prediction.objects.filter(
                detector=detector, version=version, image_id__in=[r.image_id for r in records]
            ).values_list("image_id", flat=True)
        )
        rows: list[Prediction] = []
        seen: set[int] = set()
        for record, (kind, output, error) in zip(records, checked, strict=True):
            if record.image_id in existing or record.image_id in seen:
                continue
            seen.add(record.image_id)
            rows.append(
                Prediction(
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
            )
        Prediction.objects.bulk_create(rows, ignore_conflicts=True)
    failed = sum(1 for row in rows if row.status == PredictionStatus.FAILED)
    return StoreResult(ok=len(rows) - failed, failed=failed)


# --- detector runs -------------------------------------------------------------------------------
def detector_run_start(
    *,
    detector: str,
    version: str,
    study: Study | None,
    t2i_model: str,
    shard: Shard | None,
    device: str,
    batch_size: int,
    n_total: int,
    n_skipped: int,
) -> DetectorRun:
    return DetectorRun.objects.create(
        study=study,
        detector=detector,
        version=version,
        t2i_model=t2i_model,
        shard=str(shard) if shard else "",
        device=device,
        batch_size=batch_size,
        host=socket.gethostname()[:200],
        status=RunStatus.RUNNING,
        n_total=n_total,
        n_skipped=n_skipped,
    )


def detector_run_finish(*, run: DetectorRun, status: str, error: str = "") -> DetectorRun:
    """Close a run as finished, interrupted or failed (counters were kept up to date per batch)."""
    run.refresh_from_db()
    run.status = status
    run.error = error
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at", "updated_at"])
    return run


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


#: Threads decoding the next batch while the detector works on the current one.
DECODE_THREADS = min(4, os.cpu_count() or 1)

#: An opened image, or the error text that stopped it from opening.
Opened = PILImage.Image | str


def _open_or_error(image: Image) -> Opened:
    return image_open(Path(settings.MEDIA_ROOT) / image.file)


def _open_async(pool: ThreadPoolExecutor, images: Sequence[Image]) -> list[Future[Opened]]:
    """Start decoding a batch on the pool's threads (Pillow releases the GIL while decoding)."""
    return [pool.submit(_open_or_error, image) for image in images]


def _predict_batch(
    detector: Detector,
    images: Sequence[Image],
    opened: Sequence[Opened] | None = None,
    questions: Sequence[tuple[str, ...]] | None = None,
) -> list[PredictionRecord]:
    """Predict one batch; every image file gets exactly one record (ok or failed).

    ``opened`` holds the decoded images when a prefetch already did the work; otherwise they are
    opened here; ``questions`` are a judge's (per image, the keys its items ask). The prediction
    itself (a failing batch retried image by image) is ``outputs_predict``, shared with the
    workers of ``--executor ray``.
    """
    if opened is None:
        opened = [_open_or_error(image) for image in images]
    outcomes = outputs_predict(detector, opened, questions)
    return [
        _record(detector, image.pk, outcome, size=(image.width, image.height))
        for image, outcome in zip(images, outcomes, strict=True)
    ]


def _record(
    detector: Detector,
    image_id: int,
    outcome: Predicted | ItemError,
    *,
    size: tuple[int, int] | None = None,
) -> PredictionRecord:
    """A worker's outcome for one image file as the row to store, whatever process made it.

    A failure keeps the kind the detector declares. An output of another kind than declared, or
    one that breaks its kind's schema (a worker runs other code than this process), is that
    file's failure with the reason, never the batch's: ``prediction_store`` would refuse the
    whole batch for it.
    """
    declared = detector.declared_kind
    if isinstance(outcome, ItemError):
        return PredictionRecord.failure(image_id, outcome.message, outcome.seconds, declared)
    if outcome.kind != declared:
        return PredictionRecord.failure(
            image_id,
            f"{detector.key} declares {declared} output but returned {outcome.kind}",
            outcome.seconds,
            declared,
        )
    try:
        output = output_validate(outcome.kind, outcome.output)
        if size is not None and outcome.kind == OutputKind.OBJECTS:
            objects_inside_image(output, *size)
    except OutputInvalid as exc:
        return PredictionRecord.failure(
            image_id, f"invalid {declared} output: {exc}", outcome.seconds, declared
        )
    return PredictionRecord(image_id=image_id, kind=outcome.kind, output=output, seconds=outcome.seconds)


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
    """Predict every image file in scope that has no prediction for (detector, version_id).

    The scope is the files of the items of ``study`` (or of every study), of ``t2i_model`` (or
    all), in ``shard``: a file used by many items is predicted once. Nothing pending → no run
    row, and the message says so. Otherwise a DetectorRun is created, the detector loaded once
    (DetectorUnavailable: the run is stored as failed and the error re-raised), and files are
    processed in batches by id. ``should_stop`` is checked after each batch (the command's
    SIGTERM/Ctrl-C flag): the run ends as interrupted and a later call picks up where it
    stopped. A detector key that cannot name predictions (``/``) raises ValueError before
    anything runs. A judge (``Detector.needs_questions``) is bound to the study's questions first
    and asks each file the questions its items ask; StudyAskError (nothing written) when it
    cannot: no study, a study without questions, a protocol a judge cannot answer.

    With an ``executor`` (``--executor ray``) the detector is built and loaded only in its
    workers, which read the files (or get their bytes, ``send_images``) and return outputs of
    its declared kind; this process validates and stores them exactly as a local run would
    (``_run_batches_remote``, on the shared driver of detectors/remote.py).
    """
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
    run = detector_run_start(
        detector=detector.key,
        version=version,
        study=study,
        t2i_model=t2i_model,
        shard=shard,
        device=detector.device,
        batch_size=batch_size,
        n_total=n_total,
        n_skipped=in_scope - n_pending,
    )
    try:
        if executor is None:
            detector.ensure_loaded()
        else:  # --executor ray (issue 14): the workers load the detector; this process never does
            detector_executor_start(executor=executor, detector=detector)
    except BaseException as exc:  # unavailable weights, or workers that cannot be had
        error = str(exc) if isinstance(exc, DetectorUnavailable) else _error_text(exc)
        detector_run_finish(run=run, status=RunStatus.FAILED, error=error)
        raise
    meter = progress(n_total) if progress else None
    try:
        if executor is None:
            status = _run_batches(
                run=run,
                detector=detector,
                study=study,
                version=version,
                pending=pending,
                batch_size=batch_size,
                n_total=n_total,
                should_stop=should_stop,
                meter=meter,
            )
        else:
            status = _run_batches_remote(
                executor=executor,
                detector=detector,
                study=study,
                run=run,
                pending=pending,
                batch_size=batch_size,
                n_total=n_total,
                should_stop=should_stop,
                meter=meter,
                send_images=send_images,
            )
    except BaseException as exc:  # a crash (or a second Ctrl-C) must not leave a "running" row
        detector_run_finish(run=run, status=RunStatus.FAILED, error=_error_text(exc))
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


def _questions_of(
    detector: Detector, study: Study | None, images: Sequence[Image]
) -> list[tuple[str, ...]] | None:
    """A judge's questions per image (the keys its items ask); None for any other detector."""
    if not detector.needs_questions or study is None:
        return None
    keys = image_question_keys(study, [image.pk for image in images])
    return [keys.get(image.pk, ()) for image in images]


def _run_batches(
    *,
    run: DetectorRun,
    detector: Detector,
    study: Study | None,
    version: str,
    pending,
    batch_size: int,
    n_total: int,
    should_stop: Callable[[], bool],
    meter: Progress | None,
) -> str:
    """Predict batch k while batch k+1 is read from disk and decoded on other threads.

    Decoding stays off the critical path, which matters on a GPU where the model is faster than
    Pillow. Batches are taken by keyset pagination over the live "pending" set (restart-safe; a
    file another worker predicted meanwhile drops out). The next batch only has ids above the
    current one, so fetching it before the current one is stored cannot overlap.
    """
    processed, last_id = 0, 0

    def fetch(after: int, already: int) -> list[Image]:
        return list(pending.filter(id__gt=after)[: min(batch_size, n_total - already)])

    with ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="decode") as pool:
        batch = fetch(last_id, processed)
        futures = _open_async(pool, batch)
        while batch and processed < n_total:
            if should_stop():
                return RunStatus.INTERRUPTED
            opened = [future.result() for future in futures]
            last_id = batch[-1].pk
            upcoming = fetch(last_id, processed + len(batch)) if processed + len(batch) < n_total else []
            next_futures = _open_async(pool, upcoming)
            started = time.perf_counter()
            records = _predict_batch(detector, batch, opened, _questions_of(detector, study, batch))
            batch_store(
                run=run, records=records, seconds=time.perf_counter() - started, usage=detector.usage_take()
            )
            processed += len(batch)
            if meter:
                meter.advance(len(batch))
            batch, futures = upcoming, next_futures
    return RunStatus.INTERRUPTED if should_stop() and processed < n_total else RunStatus.FINISHED


def _run_batches_remote(
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
) -> str:
    """Predict ``pending`` (at most ``n_total`` image files, each once) on the executor's
    workers; → run status. Every output is checked against ``detector``'s declared kind and
    validated here before it is stored (``_record``); a failure is stored with its error.

    Batches are taken by keyset pagination over the live pending set, as the local loop does:
    the batches in flight hold ids up to the last one fetched, so the next fetch cannot overlap
    them. The run's ``seconds`` grows by the wall time between stored batches, so its images/s
    is the whole pool's throughput.
    """
    media = Path(settings.MEDIA_ROOT).resolve()
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
            payloads: list[Any] = [image_payload(media / image.file, send_images) for image in images]
            asked = _questions_of(detector, study, images)
            if asked is not None:  # a judge: each image travels with its questions' keys
                payloads = [AskedImage(payload, keys) for payload, keys in zip(payloads, asked, strict=True)]
            yield [(image.pk, payload) for image, payload in zip(images, payloads, strict=True)]

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


#: The run's counters a detector's ``usage_take`` may advance.
USAGE_COUNTERS = ("requests", "cache_hits", "prompt_tokens", "completion_tokens")


def batch_store(
    *,
    run: DetectorRun,
    records: Sequence[PredictionRecord],
    seconds: float,
    usage: dict[str, float] | None = None,
) -> StoreResult:
    """Store one batch's predictions and advance the run's counters, in one transaction;
    ``usage`` (``Detector.usage_take``) adds what the batch spent: requests, cache hits, tokens
    and ``cost_usd``."""
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


# --- importing predictions made elsewhere --------------------------------------------------------
IMPORT_REQUIRED = ("image", "detector")


class PredictionImportRejected(Exception):
    """Nothing was imported; ``errors`` lists every problem, row by row (line numbers of the file)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


@dataclass(frozen=True)
class PredictionImportSummary:
    """What an import stored (or, in a dry run, would store), and the rows it left alone: the
    same result stored already for the same image, detector and version."""

    created: int
    by_detector: dict[str, int]
    unchanged: int = 0


def _read_rows(csv_path: Path | str) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of the file with their line numbers (the header is line 1), read lazily: a file
    of a million rows is never held at once. The header needs image, detector and prediction
    or output; a file that is not UTF-8 CSV raises PredictionImportRejected wherever it breaks."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [name.strip() for name in (reader.fieldnames or [])]
            if not header:
                raise PredictionImportRejected(
                    [f"{csv_path}: empty file (need columns image, detector, prediction or output)"]
                )
            wanted = [*IMPORT_REQUIRED, "output" if "output" in header else "prediction"]
            missing = [name for name in wanted if name not in header]
            if missing:
                either = " (or output)" if "prediction" in missing else ""
                raise PredictionImportRejected(
                    [f"{csv_path}: missing column(s) {', '.join(missing)}{either}; found {', '.join(header)}"]
                )
            reader.fieldnames = header
            for line, row in enumerate(reader, start=2):
                yield line, {k: read_cell(v) for k, v in row.items() if k is not None}
    except FileNotFoundError:
        raise PredictionImportRejected([f"{csv_path}: no such file"]) from None
    except UnicodeDecodeError:
        raise PredictionImportRejected([f"{csv_path}: not UTF-8 text"]) from None
    except csv.Error as exc:
        raise PredictionImportRejected([f"{csv_path}: not a readable CSV ({exc})"]) from None


@dataclass(frozen=True)
class _Candidate:
    """An image file a path of the import names, in one study."""

    image_id: int
    study_slug: str


def _image_index(paths: set[str]) -> dict[str, set[_Candidate]]:
    """path → the image files it names: item images imported under that source path, else the
    images of the items with that key (a pair's key names both its files)."""
    index: dict[str, set[_Candidate]] = {}
    # A path with a NUL character names no image (and PostgreSQL refuses it in a query).
    paths = {path for path in paths if "\x00" not in path}
    found: list[tuple[int, str, str]] = []
    with connection.cursor() as cursor:
        for chunk in in_chunks(sorted(paths)):
            cursor.execute(*_image_index_query(chunk))
            found += cursor.fetchall()
    for image_id, slug, path in found:
        index.setdefault(path, set()).add(_Candidate(image_id, slug))
    # One-image items have their path as key, so this second look-up is for the rest only.
    for chunk in in_chunks(sorted(paths - set(index))):
        for image_id, slug, key in ItemImage.objects.filter(item__key__in=chunk).values_list(
            "image_id", "item__study__slug", "item__key"
        ):
            index.setdefault(key, set()).add(_Candidate(image_id, slug))
    return index


def _image_index_query(paths: list[str]) -> tuple[str, list[Any]]:
    """The statement that finds the item images imported under ``paths`` → (image id, study
    slug, path) rows. Plain SQL, not the ORM (which prepares every value of a chunk). On
    PostgreSQL the paths travel as one JSON array joined as a table: its row estimate (100)
    keeps the plan an index look-up per path, where an ``IN`` list of the same paths joined to
    the items was answered by reading every item of a 100,000-item study (50 ms a chunk, a third
    of the import), and the driver escapes no array element one by one."""
    tables = {
        "ii": ItemImage._meta.db_table,
        "i": StudyItem._meta.db_table,
        "s": Study._meta.db_table,
    }
    joins = "JOIN {i} i ON i.id = ii.item_id JOIN {s} s ON s.id = i.study_id".format(**tables)
    if connection.vendor == "postgresql":
        return (
            "SELECT ii.image_id, s.slug, ii.source_path FROM json_array_elements_text(%s::json) p(path) "
            f"JOIN {tables['ii']} ii ON ii.source_path = p.path {joins}",
            [json.dumps(paths)],
        )
    where, params = is_in("ii.source_path", paths)
    return f"SELECT ii.image_id, s.slug, ii.source_path FROM {tables['ii']} ii {joins} WHERE {where}", params


_NO_CANDIDATES: frozenset[_Candidate] = frozenset()


def _row_image(path: str, candidates: AbstractSet[_Candidate], slug: str) -> int:
    """The one image file ``path`` names (in study ``slug`` if given); raises ValueError."""
    if len(candidates) == 1:  # the usual case, without the sets below
        (only,) = candidates
        if not slug or only.study_slug == slug:
            return only.image_id
    if slug:
        candidates = {c for c in candidates if c.study_slug == slug}
        if not candidates:
            raise ValueError(f"no image {path!r} in study {slug!r}")
    elif not candidates:
        raise ValueError(f"no image {path!r} has been imported")
    files = {c.image_id for c in candidates}
    if len(files) > 1:
        slugs = sorted({c.study_slug for c in candidates})
        if len(slugs) > 1 and not slug:
            raise ValueError(f"image {path!r} is in several studies ({', '.join(slugs)}); give --study")
        raise ValueError(
            f"{path!r} names {len(files)} image files in study {slugs[0]} (an item with several "
            "images): give the path of the image itself"
        )
    return files.pop()


def _parse_scores(row: dict[str, str]) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    if row.get("scores"):
        try:
            parsed = json_loads_bounded(row["scores"], field="scores")
        except JSONOutOfBounds as exc:
            if exc.problem.startswith("is not valid JSON"):
                raise ValueError(f"scores is not JSON: {row['scores'][:80]!r}") from None
            raise ValueError(str(exc)) from None
        if not isinstance(parsed, dict):
            raise ValueError('scores must be a JSON object, e.g. {"male": 0.9}')
        scores.update(parsed)
    if row.get("score"):
        try:
            score = float(row["score"])
        except ValueError:
            raise ValueError(f"score is not a number: {row['score']!r}") from None
        if not math.isfinite(score):
            raise ValueError(f"score must be finite, got {row['score']!r}")
        scores["score"] = score
    return scores


def _parse_seconds(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"seconds is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"seconds must be a non-negative number, got {text!r}")
    return value


def _parse_output(row: dict[str, str], kind: str) -> dict[str, Any] | None:
    """The row's ``output`` column checked against ``kind``, or None when it is empty."""
    text = row.get("output", "")
    if not text:
        return None
    try:
        parsed = json_loads_bounded(text, field="output")
    except JSONOutOfBounds as exc:
        if exc.problem.startswith("is not valid JSON"):
            raise ValueError(f"output is not JSON: {text[:80]!r}") from None
        raise ValueError(str(exc)) from None
    try:
        return output_validate(kind, parsed)
    except OutputInvalid as exc:
        where = "output" if exc.field == "output" else f"output.{exc.field}"
        raise ValueError(f"{where}: {exc.problem} ({kind} output)") from None


_REASONS = {choice.value: choice.value for choice in FilterReason} | {
    choice.label.lower(): choice.value for choice in FilterReason
}


def _gender_columns(row: dict[str, str]) -> dict[str, Any]:
    """The gender output the columns prediction, reason, score(s) and detail describe.

    Unknown reasons (another tool's words) are filed under "other" with their text as detail.
    Raises ValueError naming the column.
    """
    prediction = row.get("prediction", "").lower()
    reason, detail = row.get("reason", ""), row.get("detail", "")
    if prediction not in ("male", "female", "filtered"):
        raise ValueError(f"prediction must be male, female or filtered, got {row.get('prediction', '')!r}")
    if prediction != "filtered" and reason:
        raise ValueError(f"a reason is only allowed with filtered, got {reason!r} for {prediction}")
    known = _REASONS.get(reason.lower()) if prediction == "filtered" else ""
    if known is None:
        known, detail = FilterReason.OTHER, detail or reason
    output = {"label": prediction, "reason": known, "scores": _parse_scores(row), "detail": detail}
    try:
        return validate_gender(output)
    except OutputInvalid as exc:
        raise ValueError(str(exc)) from None


def _columns_agree(row: dict[str, str], kind: str, output: dict[str, Any]) -> None:
    """With an ``output``, the verdict columns must be empty or say the same (as an exported
    file does); raises ValueError naming the first column that disagrees."""
    scores_given = bool(row.get("score")) or row.get("scores", "") not in ("", "{}")
    if kind != OutputKind.GENDER:
        for column in ("prediction", "reason", "detail", "score"):
            if row.get(column):
                raise ValueError(f"{column} is for gender rows; a {kind} row has only its output")
        if scores_given and _parse_scores(row) != output.get("scores", {}):
            raise ValueError("scores disagrees with output.scores")
        return
    if not (row.get("prediction") or row.get("reason") or row.get("detail") or scores_given):
        return
    columns = _gender_columns({**row, "prediction": row.get("prediction") or output["label"]})
    for key, column in (("label", "prediction"), ("reason", "reason"), ("detail", "detail")):
        if row.get(column) and columns.get(key, "") != output.get(key, ""):
            raise ValueError(f"{column} {row[column]!r} disagrees with output.{key} {output.get(key, '')!r}")
    if scores_given and columns["scores"] != output["scores"]:
        raise ValueError("scores disagrees with output.scores")


def _parse_result(row: dict[str, str]) -> tuple[str, str, dict[str, Any], str]:
    """→ (status, kind, output, error) of one row; raises ValueError naming the column."""
    status = row.get("status", "").lower() or PredictionStatus.OK
    kind = row.get("kind", "").lower() or OutputKind.GENDER
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {row['kind']!r}")
    if status == PredictionStatus.FAILED:
        if row.get("prediction"):
            raise ValueError("a failed row has no prediction")
        if row.get("output", "") not in ("", "{}"):
            raise ValueError("a failed row has no output")
        return status, kind, {}, row.get("error", "") or "failed (imported)"
    if status != PredictionStatus.OK:
        raise ValueError(f"status must be ok or failed, got {row['status']!r}")
    output = _parse_output(row, kind)
    if output is not None:
        _columns_agree(row, kind, output)
        return status, kind, output, ""
    if kind != OutputKind.GENDER:
        raise ValueError(f"output is empty: a {kind} row needs its output as a JSON object")
    return status, kind, _gender_columns(row), ""


class _Staged(NamedTuple):
    """A checked row of an import, as staged between the checking pass and the writing pass
    (pickled to a temporary file, so a million rows cost disk, not memory). A plain tuple: a
    Prediction model instance per row costs more than the row's checks."""

    image_id: int
    detector: str
    version: str
    kind: str
    status: str
    output: dict[str, Any]
    error: str
    seconds: float | None


# The columns of a staged row, then created_at.
_STAGED_COLUMNS = (*_Staged._fields, "created_at")


def predictions_import(
    *,
    csv_path: Path | str,
    study: Study | None = None,
    version: str = "imported",
    dry_run: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> PredictionImportSummary:
    """Load predictions made elsewhere: all rows or none.

    Columns: image (the source path of an item image as imported, or an item's key), detector,
    and either prediction (male|female|filtered) or output (a JSON object of the row's kind);
    optional kind (gender by default; attributes, measurements, objects need output), score,
    scores (JSON), reason, detail, version, study, status (ok|failed), error, seconds — so an
    ``export_predictions --format csv`` file reads back unchanged. With an output, the verdict
    columns must be empty or agree with it. A row's own version/study columns win over
    ``version``/``study``. Unknown reasons become "other" with their text as detail. A detector
    name with ``/`` is refused (it breaks report URLs). The prediction belongs to the image file,
    so two rows naming the same file (say, a seed photo by two paths) are duplicates. A row whose
    image has a prediction of its detector and version already is left alone when its result is
    the same (counted in ``unchanged``: importing a file twice changes nothing) and refused when
    it differs. Raises PredictionImportRejected listing every bad row. ``dry_run``: every check, nothing written;
    the summary counts what would be stored.

    The file is streamed in two passes, so memory stays flat whatever its size: the first
    checks it a batch at a time (``studies.batching.import_batch_rows`` rows; one look-up of
    their images, one of their stored predictions per batch, every ``__in`` list split under
    the database's variable limit) and stages the checked rows in a temporary file; only when
    every row of the file is good does the second pass write the staged rows, in batches, in
    ONE transaction — so a bad row anywhere writes nothing, and a failure writes nothing.
    ``progress(stage, rows)`` is called after each batch of each pass (``"checked"``,
    ``"written"``).
    """
    errors: list[str] = []
    by_detector: dict[str, int] = {}
    # (detector, version) → image id → line: the file's own duplicates, across batches. Two
    # ints per row (not a Prediction object), ~100 bytes at a million rows.
    seen: dict[tuple[str, str], dict[int, int]] = {}
    n_rows = 0
    unchanged: list[int] = []  # one count, a list so each batch adds to it
    with tempfile.TemporaryFile(prefix="biaslab-predictions-") as staging:
        for batch in batches(_read_rows(csv_path), import_batch_rows()):
            n_rows += len(batch)
            staged = _batch_check(
                batch, study=study, version=version, seen=seen, errors=errors, unchanged=unchanged
            )
            if not errors:  # once a row is bad nothing will be written: stop staging
                pickle.dump(staged, staging, protocol=pickle.HIGHEST_PROTOCOL)
                for row in staged:
                    by_detector[row.detector] = by_detector.get(row.detector, 0) + 1
            if progress:
                progress("checked", len(batch))
        if not n_rows:
            raise PredictionImportRejected([f"{csv_path}: no data rows"])
        if errors:
            raise PredictionImportRejected(sorted(errors, key=_line_number))
        if not dry_run:
            staging.seek(0)
            now = timezone.now()
            with transaction.atomic():
                while True:
                    try:
                        staged = pickle.load(staging)
                    except EOFError:
                        break
                    # Plain multi-row INSERTs of the staged tuples (no model instance per row).
                    rows_insert(Prediction, _STAGED_COLUMNS, [(*row, now) for row in staged])
                    if progress:
                        progress("written", len(staged))
    return PredictionImportSummary(
        created=sum(by_detector.values()), by_detector=by_detector, unchanged=sum(unchanged)
    )


def _batch_check(
    batch: list[tuple[int, dict[str, str]]],
    *,
    study: Study | None,
    version: str,
    seen: dict[tuple[str, str], dict[int, int]],
    errors: list[str],
    unchanged: list[int],
) -> list[_Staged]:
    """Check one batch of rows (appending each bad row's error, and the count of rows stored
    already with the same result to ``unchanged``); return its good rows to write."""
    index = _image_index({row["image"] for _, row in batch if row.get("image")})
    good: list[_Staged] = []
    lines: dict[tuple[int, str, str], int] = {}
    slugs: dict[tuple[int, str, str], str] = {}  # the study a row names, for the study checks
    verdicts: dict[tuple[str | None, ...], tuple[str, str, dict[str, Any], str]] = {}
    checked_kinds = set(STUDY_CHECKS)  # read from the registry once a batch, not once a row
    for line, row in batch:
        try:
            prediction = _row_prediction(row, index=index, study=study, version=version, verdicts=verdicts)
        except ValueError as exc:
            errors.append(f"line {line}: {exc}")
            continue
        of_pair = seen.setdefault((prediction.detector, prediction.version), {})
        if prediction.image_id in of_pair:
            errors.append(
                f"line {line}: duplicate of line {of_pair[prediction.image_id]} (same image, detector, version)"
            )
            continue
        of_pair[prediction.image_id] = line
        key = (prediction.image_id, prediction.detector, prediction.version)
        lines[key] = line
        if prediction.kind in checked_kinds:  # only these read the study again
            slugs[key] = row.get("study", "") or (study.slug if study else "")
        good.append(prediction)
    stored, same = _already_stored(good, lines)
    if same:
        unchanged.append(len(same))
        good = [p for p in good if (p.image_id, p.detector, p.version) not in same]
    found = stored + _boxes_outside(good, lines) + _outputs_unfit(good, lines, slugs)
    if not found:
        return good
    errors.extend(found)
    refused = {_line_number(error) for error in found}
    return [p for p in good if lines[(p.image_id, p.detector, p.version)] not in refused]


# The columns ``_parse_result`` reads: two rows equal in them have the same result.
_RESULT_COLUMNS = ("status", "kind", "prediction", "reason", "detail", "score", "scores", "output", "error")


def _row_prediction(
    row: dict[str, str],
    *,
    index: dict[str, set[_Candidate]],
    study: Study | None,
    version: str,
    verdicts: dict[tuple[str | None, ...], tuple[str, str, dict[str, Any], str]],
) -> _Staged:
    """One row checked → its staged prediction; raises ValueError naming the column.
    ``verdicts``: the batch's results of ``_parse_result`` by the row's result columns (a
    batch repeats a few verdicts thousands of times when the file has no scores; the outputs
    are shared, never changed after). A refused verdict is not remembered: it raises again."""
    nul = (
        [column for column, value in row.items() if "\x00" in value]
        if "\x00" in "".join(row.values())
        else []
    )
    if nul:  # PostgreSQL stores no NUL character in text: the whole write would fail, unnamed
        raise ValueError(f"column '{nul[0]}' contains a NUL character")
    path, detector = row.get("image", ""), row.get("detector", "")
    if not path:
        raise ValueError("image is empty")
    detector_name_check(detector)
    row_version = row.get("version", "") or version
    if len(row_version) > 200:
        raise ValueError("version is longer than 200 characters")
    slug = row.get("study", "") or (study.slug if study else "")
    image_id = _row_image(path, index.get(path, _NO_CANDIDATES), slug)
    key = tuple(map(row.get, _RESULT_COLUMNS))
    found = verdicts.get(key)
    if found is None:
        found = verdicts[key] = _parse_result(row)
    status, kind, output, error = found
    # Positional, in _Staged's field order: a million rows are made here.
    return _Staged(
        image_id, detector, row_version, kind, status, output, error, _parse_seconds(row.get("seconds", ""))
    )


def _line_number(error: str) -> int:
    """The line an import error names (``line 12: …``), to list errors in file order."""
    head = error.split(":", 1)[0]
    return int(head.split()[1]) if head.startswith("line ") else 0


def _boxes_outside(predictions: list[_Staged], lines: dict[tuple[int, str, str], int]) -> list[str]:
    """Rows whose objects output has a box outside its image (the sizes in one query)."""
    objects = [p for p in predictions if p.kind == OutputKind.OBJECTS and p.output]
    sizes = {
        pk: (w, h)
        for chunk in in_chunks(p.image_id for p in objects)
        for pk, w, h in Image.objects.filter(pk__in=chunk).values_list("pk", "width", "height")
    }
    errors = []
    for p in objects:
        try:
            objects_inside_image(p.output, *sizes[p.image_id])
        except OutputInvalid as exc:
            errors.append(f"line {lines[(p.image_id, p.detector, p.version)]}: output.{exc}")
    return errors


def _outputs_unfit(
    predictions: list[_Staged],
    lines: dict[tuple[int, str, str], int],
    slugs: dict[tuple[int, str, str], str],
) -> list[str]:
    """Rows whose output names a question or answer its study lacks (kinds with a study check,
    ``detectors.kinds.STUDY_CHECKS``): checked against the study the row names, else against
    the studies of its image (it must fit one). Three queries per batch (``__in`` lists split
    under the variable limit)."""
    checked = [p for p in predictions if p.kind in STUDY_CHECKS and p.output]
    if not checked:
        return []
    of_image: dict[int, set[int]] = {}
    for chunk in in_chunks(sorted({p.image_id for p in checked})):
        for image_id, study_id in ItemImage.objects.filter(image_id__in=chunk).values_list(
            "image_id", "item__study_id"
        ):
            of_image.setdefault(image_id, set()).add(study_id)
    by_slug = dict(Study.objects.filter(slug__in=set(slugs.values()) - {""}).values_list("slug", "pk"))
    questions: dict[int, dict[str, list[str]]] = {}
    for study_id, question_key, choices in Question.objects.filter(
        study_id__in={s for ids in of_image.values() for s in ids}
    ).values_list("study_id", "key", "choices"):
        questions.setdefault(study_id, {})[question_key] = [str(c["value"]) for c in choices]
    errors = []
    for p in checked:
        key = (p.image_id, p.detector, p.version)
        named = by_slug.get(slugs.get(key, ""))
        studies = sorted({named} if named is not None else of_image.get(p.image_id, set()))
        problems = []
        for study_id in studies:
            try:
                output_fits_questions(p.kind, p.output, questions.get(study_id, {}))
                break
            except OutputInvalid as exc:
                problems.append(exc)
        else:
            if problems:
                errors.append(f"line {lines[key]}: output.{problems[0]} ({p.kind} output)")
    return errors


def _already_stored(
    predictions: list[_Staged], lines: dict[tuple[int, str, str], int]
) -> tuple[list[str], set[tuple[int, str, str]]]:
    """Rows whose image already has a prediction of their detector and version: the errors of
    those whose result differs from the stored one, and the keys of those with the same result
    (a re-import of the same file: nothing to write)."""
    errors = []
    same: set[tuple[int, str, str]] = set()
    by_pair: dict[tuple[str, str], dict[int, _Staged]] = {}
    for p in predictions:
        by_pair.setdefault((p.detector, p.version), {})[p.image_id] = p
    for (detector, version), staged in by_pair.items():
        stored: list[tuple[Any, ...]] = []
        with connection.cursor() as cursor:  # plain SQL: the ORM prepares every value of a chunk
            for chunk in in_chunks(list(staged)):
                where, params = is_in("image_id", chunk)
                cursor.execute(
                    f"SELECT image_id, kind, status, output, error, seconds FROM {Prediction._meta.db_table} "
                    f"WHERE detector = %s AND version = %s AND {where}",
                    [detector, version, *params],
                )
                stored += cursor.fetchall()
        for image_id, kind, status, output, error, seconds in stored:
            p = staged[image_id]
            if isinstance(output, str | bytes):  # SQLite's JSON text (PostgreSQL's driver decodes jsonb)
                output = json.loads(output)
            if (p.kind, p.status, p.output, p.error, p.seconds) == (kind, status, output, error, seconds):
                same.add((image_id, detector, version))
                continue
            errors.append(
                f"line {lines[(image_id, detector, version)]}: this image already has a "
                f"{detector}@{version} prediction with another result (import under another --version)"
            )
    return sorted(errors, key=lambda e: int(e.split(":")[0].split()[1])), same
