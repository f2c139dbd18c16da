"""Writes of the model-output side: storing predictions, running a detector, importing predictions.

``detector_run`` is the restartable loop behind ``run_detectors``: it selects the images that
have no prediction for (detector, version), predicts them in batches and stores each batch —
predictions plus the run's counters — in one transaction. The unique constraint on (image,
detector, version) backs it, so two workers that overlap by mistake never store a duplicate.
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from PIL import Image as PILImage

from annotate.models import Image, Study
from detectors.base import Detector, DetectorOutput, DetectorUnavailable
from detectors.models import DetectorRun, FilterReason, Prediction, PredictionStatus, RunStatus, Verdict
from detectors.progress import Progress
from detectors.selectors import Shard, images_in_scope, images_pending


# --- storing predictions -----------------------------------------------------------------------
@dataclass(frozen=True)
class PredictionRecord:
    """One prediction to store: an ok verdict or a failure with its error."""

    image_id: int
    status: str = PredictionStatus.OK
    verdict: str = ""
    filter_reason: str = ""
    detail: str = ""
    scores: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float | None = None

    @classmethod
    def from_output(cls, image_id: int, output: DetectorOutput, seconds: float | None) -> PredictionRecord:
        return cls(
            image_id=image_id,
            verdict=output.verdict,
            filter_reason=output.filter_reason,
            detail=output.detail,
            scores=dict(output.scores),
            seconds=seconds,
        )

    @classmethod
    def failure(cls, image_id: int, error: str, seconds: float | None = None) -> PredictionRecord:
        return cls(image_id=image_id, status=PredictionStatus.FAILED, error=error, seconds=seconds)


@dataclass(frozen=True)
class StoreResult:
    ok: int
    failed: int


def prediction_store(
    *, detector: str, version: str, records: Sequence[PredictionRecord], run: DetectorRun | None = None
) -> StoreResult:
    """Store a batch of predictions in one transaction; images already predicted are left alone.

    Returns how many ok and failed rows this call created. Conflicts on (image, detector,
    version) are ignored at the database, so a concurrent worker that stored the same image a
    moment earlier wins and nothing is duplicated (the counts then include that image once more
    than it should — only possible when two workers were given overlapping work).
    """
    with transaction.atomic():
        existing = set(
            Prediction.objects.filter(
                detector=detector, version=version, image_id__in=[r.image_id for r in records]
            ).values_list("image_id", flat=True)
        )
        rows: list[Prediction] = []
        seen: set[int] = set()
        for record in records:
            if record.image_id in existing or record.image_id in seen:
                continue
            seen.add(record.image_id)
            rows.append(
                Prediction(
                    image_id=record.image_id,
                    detector=detector,
                    version=version,
                    status=record.status,
                    verdict=record.verdict,
                    filter_reason=record.filter_reason,
                    detail=record.detail,
                    scores=record.scores,
                    error=record.error,
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


def _open_rgb(image: Image) -> PILImage.Image:
    path = Path(settings.MEDIA_ROOT) / image.file
    with PILImage.open(path) as img:
        img.load()
        return img.convert("RGB")


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


#: Threads decoding the next batch while the detector works on the current one.
DECODE_THREADS = min(4, os.cpu_count() or 1)

#: An opened image, or the error text that stopped it from opening.
Opened = PILImage.Image | str


def _open_or_error(image: Image) -> Opened:
    try:
        return _open_rgb(image)
    except Exception as exc:  # any decoder error of a corrupt file; stored, never fatal
        return f"cannot open image: {_error_text(exc)}"


def _open_async(pool: ThreadPoolExecutor, images: Sequence[Image]) -> list[Future[Opened]]:
    """Start decoding a batch on the pool's threads (Pillow releases the GIL while decoding)."""
    return [pool.submit(_open_or_error, image) for image in images]


def _predict_batch(
    detector: Detector, images: Sequence[Image], opened: Sequence[Opened] | None = None
) -> list[PredictionRecord]:
    """Predict one batch; every image gets exactly one record (ok or failed).

    ``opened`` holds the decoded images when a prefetch already did the work; otherwise they are
    opened here.
    """
    started = time.perf_counter()
    if opened is None:
        opened = [_open_or_error(image) for image in images]
    records: dict[int, PredictionRecord] = {}
    good: list[tuple[Image, PILImage.Image]] = []
    for image, item in zip(images, opened, strict=True):
        if isinstance(item, str):
            records[image.pk] = PredictionRecord.failure(image.pk, item)
        else:
            good.append((image, item))
    if good:
        try:
            outputs = detector.predict([pil for _, pil in good])
            if len(outputs) != len(good):
                raise RuntimeError(f"detector returned {len(outputs)} outputs for {len(good)} images")
        except Exception:
            # One bad image should not cost the whole batch: retry one by one to find it.
            for image, pil in good:
                records[image.pk] = _predict_one(detector, image, pil)
        else:
            per_image = (time.perf_counter() - started) / len(good)
            for (image, _), output in zip(good, outputs, strict=True):
                records[image.pk] = PredictionRecord.from_output(image.pk, output, per_image)
    return [records[image.pk] for image in images]


def _predict_one(detector: Detector, image: Image, pil: PILImage.Image) -> PredictionRecord:
    started = time.perf_counter()
    try:
        outputs = detector.predict([pil])
        if len(outputs) != 1:
            raise RuntimeError(f"detector returned {len(outputs)} outputs for 1 image")
    except Exception as exc:  # the detector's own failure on this image, kept with its error
        return PredictionRecord.failure(image.pk, _error_text(exc), time.perf_counter() - started)
    return PredictionRecord.from_output(image.pk, outputs[0], time.perf_counter() - started)


@dataclass
class RunOutcome:
    """What ``detector_run`` did; ``run`` is None when there was nothing to do."""

    run: DetectorRun | None
    version: str
    n_in_scope: int
    message: str


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
) -> RunOutcome:
    """Predict every image in scope that has no prediction for (detector, version_id).

    Nothing pending → no run row, and the message says so. Otherwise a DetectorRun is created,
    the detector loaded once (DetectorUnavailable: the run is stored as failed and the error
    re-raised), and images are processed in batches by id. ``should_stop`` is checked after
    each batch (the command's SIGTERM/Ctrl-C flag): the run ends as interrupted and a later
    call picks up where it stopped.
    """
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
            message=f"Nothing to do: all {in_scope} images in scope already have a "
            f"{detector.key}@{version} prediction.",
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
        detector.ensure_loaded()
    except DetectorUnavailable as exc:
        detector_run_finish(run=run, status=RunStatus.FAILED, error=str(exc))
        raise
    meter = progress(n_total) if progress else None
    try:
        status = _run_batches(
            run=run,
            detector=detector,
            version=version,
            pending=pending,
            batch_size=batch_size,
            n_total=n_total,
            should_stop=should_stop,
            meter=meter,
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
    )


def _run_batches(
    *,
    run: DetectorRun,
    detector: Detector,
    version: str,
    pending,
    batch_size: int,
    n_total: int,
    should_stop: Callable[[], bool],
    meter: Progress | None,
) -> str:
    """Predict batch k while batch k+1 is read from disk and decoded on other threads.

    Decoding stays off the critical path, which matters on a GPU where the model is faster than
    Pillow. Batches are taken by keyset pagination over the live "pending" set (restart-safe; an
    image another worker predicted meanwhile drops out). The next batch only has ids above the
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
            records = _predict_batch(detector, batch, opened)
            seconds = time.perf_counter() - started
            with transaction.atomic():
                stored = prediction_store(detector=detector.key, version=version, records=records, run=run)
                DetectorRun.objects.filter(pk=run.pk).update(
                    n_done=F("n_done") + stored.ok,
                    n_failed=F("n_failed") + stored.failed,
                    seconds=F("seconds") + seconds,
                    updated_at=timezone.now(),
                )
            processed += len(batch)
            if meter:
                meter.advance(len(batch))
            batch, futures = upcoming, next_futures
    return RunStatus.INTERRUPTED if should_stop() and processed < n_total else RunStatus.FINISHED


# --- importing predictions made elsewhere --------------------------------------------------------
IMPORT_REQUIRED = ("image", "detector", "prediction")


class PredictionImportRejected(Exception):
    """Nothing was imported; ``errors`` lists every problem, row by row (line numbers of the file)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


@dataclass(frozen=True)
class PredictionImportSummary:
    created: int
    by_detector: dict[str, int]


def _read_rows(csv_path: Path | str) -> list[dict[str, str]]:
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [name.strip() for name in (reader.fieldnames or [])]
            missing = [name for name in IMPORT_REQUIRED if name not in header]
            if not header:
                raise PredictionImportRejected(
                    [f"{csv_path}: empty file (need columns image, detector, prediction)"]
                )
            if missing:
                raise PredictionImportRejected(
                    [f"{csv_path}: missing column(s) {', '.join(missing)}; found {', '.join(header)}"]
                )
            reader.fieldnames = header
            return [{k: (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
    except FileNotFoundError:
        raise PredictionImportRejected([f"{csv_path}: no such file"]) from None
    except UnicodeDecodeError:
        raise PredictionImportRejected([f"{csv_path}: not UTF-8 text"]) from None
    except csv.Error as exc:
        raise PredictionImportRejected([f"{csv_path}: not a readable CSV ({exc})"]) from None


def _image_index(paths: set[str]) -> dict[str, list[tuple[int, int, str]]]:
    """source_path → [(image id, study id, study slug)] for every study holding that path."""
    index: dict[str, list[tuple[int, int, str]]] = {}
    ordered = sorted(paths)
    for start in range(0, len(ordered), 500):
        chunk = ordered[start : start + 500]
        for pk, study_id, slug, path in Image.objects.filter(source_path__in=chunk).values_list(
            "id", "study_id", "study__slug", "source_path"
        ):
            index.setdefault(path, []).append((pk, study_id, slug))
    return index


def _parse_scores(row: dict[str, str]) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    if row.get("scores"):
        try:
            parsed = json.loads(row["scores"])
        except json.JSONDecodeError:
            raise ValueError(f"scores is not JSON: {row['scores']!r}") from None
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


_REASONS = {choice.value: choice.value for choice in FilterReason} | {
    choice.label.lower(): choice.value for choice in FilterReason
}


def _parse_verdict(row: dict[str, str]) -> tuple[str, str, str, str, str]:
    """→ (status, verdict, filter_reason, detail, error) of one row; raises ValueError."""
    status = row.get("status", "").lower() or PredictionStatus.OK
    prediction = row["prediction"].lower()
    reason, detail = row.get("reason", ""), row.get("detail", "")
    if status == PredictionStatus.FAILED:
        if prediction:
            raise ValueError("a failed row has no prediction")
        return status, "", "", detail, row.get("error", "") or "failed (imported)"
    if status != PredictionStatus.OK:
        raise ValueError(f"status must be ok or failed, got {row['status']!r}")
    if prediction not in Verdict.values:
        raise ValueError(f"prediction must be male, female or filtered, got {row['prediction']!r}")
    if prediction != Verdict.FILTERED:
        if reason:
            raise ValueError(f"a reason is only allowed with filtered, got {reason!r} for {prediction}")
        return status, prediction, "", detail, ""
    known = _REASONS.get(reason.lower())
    if known is None:
        # The reason vocabulary of another tool: keep its words, file them under "other".
        return status, prediction, FilterReason.OTHER, detail or reason, ""
    return status, prediction, known, detail, ""


def predictions_import(
    *, csv_path: Path | str, study: Study | None = None, version: str = "imported"
) -> PredictionImportSummary:
    """Load predictions made elsewhere: all rows or none.

    Columns: image (source_path as imported), detector, prediction (male|female|filtered);
    optional score, scores (JSON), reason, detail, version, study, status (ok|failed), error,
    seconds — so an ``export_predictions --format csv`` file reads back unchanged. A row's own
    version/study columns win over ``version``/``study``. Unknown reasons become "other" with
    their text in ``detail``. Raises PredictionImportRejected listing every bad row.
    """
    rows = _read_rows(csv_path)
    if not rows:
        raise PredictionImportRejected([f"{csv_path}: no data rows"])
    index = _image_index({row["image"] for row in rows if row.get("image")})
    errors: list[str] = []
    to_create: list[Prediction] = []
    seen: dict[tuple[int, str, str], int] = {}
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        try:
            prediction = _row_prediction(row, index=index, study=study, version=version)
        except ValueError as exc:
            errors.append(f"line {line}: {exc}")
            continue
        key = (prediction.image_id, prediction.detector, prediction.version)
        if key in seen:
            errors.append(f"line {line}: duplicate of line {seen[key]} (same image, detector, version)")
            continue
        seen[key] = line
        to_create.append(prediction)
    errors.extend(_already_stored(to_create, seen))
    if errors:
        raise PredictionImportRejected(errors)
    with transaction.atomic():
        Prediction.objects.bulk_create(to_create)
    by_detector: dict[str, int] = {}
    for prediction in to_create:
        by_detector[prediction.detector] = by_detector.get(prediction.detector, 0) + 1
    return PredictionImportSummary(created=len(to_create), by_detector=by_detector)


def _row_prediction(
    row: dict[str, str], *, index: dict[str, list[tuple[int, int, str]]], study: Study | None, version: str
) -> Prediction:
    path, detector = row.get("image", ""), row.get("detector", "")
    if not path:
        raise ValueError("image is empty")
    if not detector:
        raise ValueError("detector is empty")
    if len(detector) > 100:
        raise ValueError("detector name is longer than 100 characters")
    row_version = row.get("version", "") or version
    if len(row_version) > 200:
        raise ValueError("version is longer than 200 characters")
    candidates = index.get(path, [])
    slug = row.get("study", "") or (study.slug if study else "")
    if slug:
        candidates = [c for c in candidates if c[2] == slug]
        if not candidates:
            raise ValueError(f"no image {path!r} in study {slug!r}")
    elif not candidates:
        raise ValueError(f"no image {path!r} has been imported")
    elif len(candidates) > 1:
        slugs = ", ".join(sorted(c[2] for c in candidates))
        raise ValueError(f"image {path!r} is in several studies ({slugs}); give --study")
    status, verdict, reason, detail, error = _parse_verdict(row)
    return Prediction(
        image_id=candidates[0][0],
        detector=detector,
        version=row_version,
        status=status,
        verdict=verdict,
        filter_reason=reason,
        detail=detail,
        scores=_parse_scores(row),
        error=error,
        seconds=_parse_seconds(row.get("seconds", "")),
    )


def _already_stored(predictions: list[Prediction], lines: dict[tuple[int, str, str], int]) -> list[str]:
    errors = []
    by_pair: dict[tuple[str, str], list[int]] = {}
    for p in predictions:
        by_pair.setdefault((p.detector, p.version), []).append(p.image_id)
    for (detector, version), image_ids in by_pair.items():
        stored = Prediction.objects.filter(
            detector=detector, version=version, image_id__in=image_ids
        ).values_list("image_id", flat=True)
        for image_id in stored:
            errors.append(
                f"line {lines[(image_id, detector, version)]}: this image already has a "
                f"{detector}@{version} prediction (import under another --version)"
            )
    return sorted(errors, key=lambda e: int(e.split(":")[0].split()[1]))
