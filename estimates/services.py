"""Writes of the estimates app: drawing a sampling round, asking for an estimate, and the worker's jobs."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from estimates import estimands
from estimates import selectors as sel
from estimates.kept import report_to_json
from estimates.models import Design, EstimateJob, JobStatus, KeptEstimate, RoundItem, SamplingRound
from metrics import ppi_design, stratified
from studies.batching import bulk_batch_size, in_chunks
from studies.models import Item, Study

#: The largest seed drawn when none is given (fits a BigIntegerField and numpy's seeding).
MAX_SEED = 2**31 - 1


class SamplingError(ValueError):
    """A round cannot be drawn as asked. ``field`` names the input to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@transaction.atomic
def sampling_round_create(
    *,
    study: Study,
    detector: str,
    budget: int,
    design: str = Design.UNIFORM,
    seed: int | None = None,
    user: User | None = None,
) -> SamplingRound:
    """Draw the next sampling round of ``study`` for ``detector``; SamplingError names the field to change."""
    spec = estimands.for_protocol(study.protocol)
    if spec is None:
        raise SamplingError("study", estimands.not_estimable(study))
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise SamplingError("budget", f"must be a whole number of labels >= 1, not {budget!r}")
    if design not in Design.values:
        raise SamplingError("design", f"must be one of {', '.join(Design.values)}, not {design!r}")
    if design not in spec.designs:
        raise SamplingError(
            "design",
            f"a {study.get_protocol_display()} study's estimate supports {', '.join(spec.designs)}, not {design!r}",
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED
    ):
        raise SamplingError("seed", f"must be a whole number from 0 to {MAX_SEED}, not {seed!r}")
    # One round at a time per study: numbering and "not drawn before" read a stable state.
    study = Study.objects.select_for_update().get(pk=study.pk)
    series = estimands.series_of(spec, study, detector)
    if series is None:
        known = ", ".join(estimands.detectors_of(spec, study)) or "none yet"
        raise SamplingError(
            "detector",
            f"'{detector}' has no {estimands.kinds_wording(spec)} predictions in study '{study.slug}' (run "
            f"run_detectors first; detectors with predictions: {known})",
        )
    version = series[0]
    frame = estimands.frame_of(spec, study, detector, version)
    for state in frame.rounds:
        if state.pending:
            raise SamplingError(
                "budget",
                f"round {state.round.number} ({detector}@{version}) still has {len(state.pending)} "
                "selected image(s) without a final label; finish labelling it before drawing another",
            )
    items = frame.items
    n = len(items)
    drawn_before = set().union(*(state.selected for state in frame.rounds)) if frame.rounds else set()
    pool = np.array([i.item_id not in drawn_before and i.human is None for i in items], dtype=bool)
    certain = np.array([i.item_id not in drawn_before and i.human is not None for i in items], dtype=bool)
    n_pool = int(pool.sum())
    if budget > n_pool:
        raise SamplingError(
            "budget",
            f"{budget} is more than the {n_pool} image(s) without a final label that no earlier round "
            f"of {detector}@{version} drew",
        )
    if design == Design.ACTIVE and not frame.rounds:
        raise SamplingError(
            "design",
            f"active needs the labels of an earlier round of {detector}@{version} to learn where the "
            "detector errs; draw the first round with design uniform",
        )
    if design != Design.UNIFORM and spec.design_pi is not None:
        pi = spec.design_pi(frame, design, budget, pool)
    elif design == Design.UNIFORM:
        pi = ppi_design.inclusion_probabilities_uniform(n, budget, eligible=pool)
    elif spec.output_codes is None:
        raise SamplingError(
            "design", f"the {study.get_protocol_display()} estimate computes no {design} design"
        )
    else:
        codes = spec.output_codes(study, detector, version)
        outputs: list[Hashable] = [codes.get(i.item_id) for i in items]
        by_code = _spread_by_code(spec, study, detector, version, frame, codes)
        if design == Design.ACTIVE:
            # Earlier rounds exist (checked above): labels follow the detector's measured errors.
            spread = {code: by_code.get(code, 1.0) for code in set(outputs)}
            pi = stratified.inclusion_probabilities_active(outputs, budget, spread=spread, eligible=pool)
        else:
            # Strata of T2I model x prompt x output code, Neyman allocation by each code's error spread.
            strata: list[Hashable] = [
                (i.t2i_model, i.prompt_id, code) for i, code in zip(items, outputs, strict=True)
            ]
            by_stratum = {key: by_code.get(key[2], 1.0) for key in strata} if by_code else None  # type: ignore[index]
            pi = stratified.inclusion_probabilities_stratified(
                strata, budget, spread=by_stratum, eligible=pool
            )
    pi[certain] = 1.0
    if seed is None:
        seed = secrets.randbelow(MAX_SEED + 1)
    selected = ppi_design.draw_bernoulli(pi, seed)
    number = (
        SamplingRound.objects.filter(study=study).order_by("-number").values_list("number", flat=True).first()
        or 0
    ) + 1
    sampling_round = SamplingRound.objects.create(
        study=study,
        number=number,
        detector=detector,
        detector_version=version,
        design=design,
        seed=seed,
        budget=budget,
        n_selected=int(selected.sum()),
        n_already_labelled=int((selected & certain).sum()),
        created_by=user if user is not None and user.is_authenticated else None,
    )
    RoundItem.objects.bulk_create(
        [
            RoundItem(round=sampling_round, item_id=item.item_id, pi=float(p), selected=bool(s))
            for item, p, s in zip(items, pi, selected, strict=True)
        ],
        batch_size=bulk_batch_size(RoundItem),  # under the variable limit (studies.batching)
    )
    to_label = [item.item_id for item, s, in_pool in zip(items, selected, pool, strict=True) if s and in_pool]
    if to_label:
        for chunk in in_chunks(to_label):  # under the database's variable limit at any budget
            Item.objects.filter(pk__in=chunk).update(queue=2)
        Study.objects.filter(pk=study.pk).update(priority_queue=True)
    return sampling_round


def _spread_by_code(
    spec: estimands.EstimandProtocol,
    study: Study,
    detector: str,
    version: str,
    frame: sel.Frame,
    codes: dict[int, Hashable],
) -> dict[Hashable, float]:
    """The 1/π-weighted spread of the detector's errors per output code in the earlier rounds' labels."""
    if not frame.rounds or spec.residuals is None:
        return {}
    residuals = spec.residuals(study, detector, version)
    seen = [
        (codes.get(item_id), residuals[item_id], 1.0 / p)
        for state in frame.rounds
        for item_id in state.selected
        if item_id in residuals and (p := state.pi.get(item_id, 0.0)) > 0
    ]
    return stratified.residual_spread(
        [c for c, _, _ in seen], [r for _, r, _ in seen], [w for _, _, w in seen]
    )


def _plain(value: Any) -> Any:
    """``value`` as plain JSON types (numpy numbers become floats, NaN and infinities null)."""

    def default(o: Any) -> Any:
        try:
            return float(o)
        except (TypeError, ValueError):
            return str(o)

    text = json.dumps(value, default=default)
    return json.loads(text, parse_constant=lambda _: None)


def estimate_keep(
    *,
    study: Study,
    detector: str,
    options: str,
    state: str,
    report: estimands.Report,
    history: bool,
    seconds: float | None = None,
) -> None:
    """Keep ``report`` as the estimate of (study, detector, options) computed from ``state``."""
    KeptEstimate.objects.update_or_create(
        study=study,
        detector=detector,
        options=options,
        defaults={
            "state": state,
            "history": history,
            "computed_at": timezone.now(),
            "seconds": seconds,
            "report": _plain(report_to_json(report)),
        },
    )


# --- Estimate jobs: computed by the worker, never inside a web request -----------------------------

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Requested:
    """What asking for an estimate gives: the kept estimate, whether it is current, and the job."""

    kept: sel.Kept | None
    current: bool
    job: EstimateJob | None


def _stale_before() -> Any:
    return timezone.now() - timedelta(seconds=settings.ESTIMATE_JOB_STALE_SECONDS)


def estimate_request(*, study: Study, detector: str, n_boot: int, seed: int, history: bool) -> Requested:
    """The estimate for the data as it is now: the kept one, or its queued job and the older estimate."""
    spec = estimands.for_protocol(study.protocol)
    if spec is None:
        raise SamplingError("study", f"'{study.slug}' has no few-label estimate")
    if estimands.series_of(spec, study, detector) is None:
        known = ", ".join(estimands.detectors_of(spec, study)) or "none yet"
        raise LookupError(
            f"'{detector}' has no {estimands.kinds_wording(spec)} predictions in study '{study.slug}' "
            f"(detectors with predictions: {known})"
        )
    options = sel.estimate_options(n_boot=n_boot, seed=seed, history=history)
    state = sel.estimate_state(study, protocol=spec.key, n_boot=n_boot, seed=seed, history=history)
    kept = sel.estimate_kept(study, detector, options)
    if kept is not None and kept.state == state:
        return Requested(kept=kept, current=True, job=None)
    job, created = EstimateJob.objects.get_or_create(
        study=study,
        detector=detector,
        state=state,
        defaults={"options": options, "n_boot": n_boot, "seed": seed, "history": history},
    )
    if not created and job.status in (JobStatus.DONE, JobStatus.FAILED):
        # Done but not kept (another computation replaced it), or failed: asked for again.
        EstimateJob.objects.filter(pk=job.pk, status=job.status).update(
            status=JobStatus.QUEUED, attempts=0, finished_at=None, spawned_at=None
        )
    estimate_worker_ensure()
    job.refresh_from_db()
    if job.status == JobStatus.DONE:  # a worker that runs in this process (tests) finished it
        kept = sel.estimate_kept(study, detector, options)
        if kept is not None and kept.state == state:
            return Requested(kept=kept, current=True, job=job)
    # Meanwhile: the kept estimate of older data, or of other options (``estimate_bias``'s).
    return Requested(kept=kept or sel.estimate_kept(study, detector, None), current=False, job=job)


def estimate_jobs_requeue_stale() -> int:
    """Queue again the running jobs whose worker died (fail those tried too often); how many."""
    stale = EstimateJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=_stale_before())
    stale.filter(attempts__gte=EstimateJob.MAX_ATTEMPTS).update(
        status=JobStatus.FAILED,
        finished_at=timezone.now(),
        error=f"Its worker stopped {EstimateJob.MAX_ATTEMPTS} times (killed, or out of memory).",
    )
    return stale.update(status=JobStatus.QUEUED, spawned_at=None)


def estimate_worker_ensure() -> bool:
    """Start a worker when a job is queued and none is alive; whether one was started."""
    estimate_jobs_requeue_stale()
    recent = _stale_before()
    queued = EstimateJob.objects.filter(status=JobStatus.QUEUED)
    first = queued.values_list("pk", flat=True).first()
    if first is None:
        return False
    if EstimateJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__gte=recent).exists():
        return False
    if EstimateJob.objects.filter(
        spawned_at__gte=recent, status__in=(JobStatus.QUEUED, JobStatus.RUNNING)
    ).exists():
        return False
    # Racing requests name the same (oldest queued) row, which the update re-reads locked: one wins.
    spawn = queued.filter(pk=first).filter(Q(spawned_at__isnull=True) | Q(spawned_at__lt=recent))
    if not spawn.update(spawned_at=timezone.now()):
        return False
    estimate_worker_start()
    return True


def estimate_worker_start() -> None:
    """Start ``manage.py estimates_worker`` detached, at low CPU priority with one numeric thread."""
    env = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1") | os.environ
    subprocess.Popen(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), "estimates_worker", "--nice", "10"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        close_fds=True,
        env=env,
    )


def estimate_job_claim() -> EstimateJob | None:
    """Claim the oldest queued job whose study has no running job, or None (race-safe)."""
    for pk in list(EstimateJob.objects.filter(status=JobStatus.QUEUED).values_list("pk", flat=True)):
        now = timezone.now()
        try:
            with transaction.atomic():
                claimed = EstimateJob.objects.filter(pk=pk, status=JobStatus.QUEUED).update(
                    status=JobStatus.RUNNING,
                    started_at=now,
                    heartbeat_at=now,
                    attempts=F("attempts") + 1,
                    error="",
                )
        except IntegrityError:
            continue  # its study already has a running job
        if claimed:
            return EstimateJob.objects.select_related("study").get(pk=pk)
    return None


def _beat(job_id: int, stop: threading.Event, every: float) -> None:
    """The heartbeat thread of a running job (its own database connection)."""
    try:
        while not stop.wait(every):
            EstimateJob.objects.filter(pk=job_id, status=JobStatus.RUNNING).update(
                heartbeat_at=timezone.now()
            )
    finally:
        connection.close()


def estimate_job_run(job: EstimateJob) -> EstimateJob:
    """Compute a claimed job's estimate and keep it, or mark the job failed; a thread beats meanwhile."""
    stop = threading.Event()
    beat = threading.Thread(
        target=_beat, args=(job.pk, stop, settings.ESTIMATE_JOB_STALE_SECONDS / 4), daemon=True
    )
    beat.start()
    started = time.monotonic()
    try:
        spec = estimands.for_protocol(job.study.protocol)
        if spec is None:
            raise SamplingError("study", f"'{job.study.slug}' has no few-label estimate")
        report = spec.report(job.study, job.detector, n_boot=job.n_boot, seed=job.seed, history=job.history)
        with transaction.atomic():
            estimate_keep(
                study=job.study,
                detector=job.detector,
                options=job.options,
                state=job.state,
                report=report,
                history=job.history,
                seconds=time.monotonic() - started,
            )
            EstimateJob.objects.filter(pk=job.pk).update(
                status=JobStatus.DONE, finished_at=timezone.now(), error=""
            )
            # Older finished jobs of the same estimate are history nobody reads.
            EstimateJob.objects.filter(
                study=job.study,
                detector=job.detector,
                options=job.options,
                status__in=(JobStatus.DONE, JobStatus.FAILED),
            ).exclude(pk=job.pk).delete()
    except Exception as error:  # recorded on the job: the page and the API show it
        log.exception("estimate job %s failed", job.pk)
        EstimateJob.objects.filter(pk=job.pk).update(
            status=JobStatus.FAILED, finished_at=timezone.now(), error=f"{type(error).__name__}: {error}"
        )
    finally:
        stop.set()
        beat.join()
    job.refresh_from_db()
    return job


def estimate_jobs_work(*, keep_going: Callable[[], bool] = lambda: True, wait: float = 0.0) -> int:
    """The worker's loop: claim and run jobs until none is left (or poll every ``wait`` s); jobs run."""
    done = 0
    while keep_going():
        if not connection.in_atomic_block:  # a long-lived worker drops a broken connection
            close_old_connections()
        estimate_jobs_requeue_stale()
        job = estimate_job_claim()
        if job is None:
            if wait <= 0 and not EstimateJob.objects.filter(status=JobStatus.QUEUED).exists():
                break
            time.sleep(wait or 1.0)  # a queued job waits for its study's running one
            continue
        estimate_job_run(job)
        done += 1
    return done
