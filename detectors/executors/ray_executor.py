"""``--executor ray``: a pool of Ray actors, each holding one loaded worker for its lifetime."""

from __future__ import annotations

import collections
import contextlib
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from detectors.executors import (
    BatchResult,
    Executor,
    ExecutorError,
    Item,
    ItemError,
    RayMissing,
    WorkerSpec,
    WorkerStats,
)

#: Environment passed from the driver to every worker (weights, offline switches, API keys).
FORWARDED_ENV_PREFIXES = ("BIASLAB_", "HF_", "TRANSFORMERS_", "YOLO_")
#: Blanked in every worker: without them Django cannot be configured, so no database either.
BLANKED_ENV = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "DJANGO_SECRET_KEY")
#: Threads each worker decodes a batch's images on (Pillow releases the GIL while decoding).
DECODE_THREADS = 4


def ray_import() -> Any:
    """The ``ray`` module, or ``RayMissing`` naming the install command. Usage statistics off:
    these machines have no internet and a run should not try to phone home."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise RayMissing() from None
    return ray


def worker_env() -> dict[str, str]:
    """The environment variables every worker gets (docs/how-to/ray.md)."""
    env = {name: value for name, value in os.environ.items() if name.startswith(FORWARDED_ENV_PREFIXES)}
    env.update(dict.fromkeys(BLANKED_ENV, ""))
    return env


class WorkerHost:
    """The actor: builds the worker from its spec on ``load()`` and runs batches on it."""

    def __init__(self, spec: WorkerSpec, name: str, env: dict[str, str]) -> None:
        # An actor owns its process until it dies, so this environment is the worker's own.
        os.environ.update(env)
        self.spec = spec
        self.name = name
        self.worker: Any = None
        self.info: dict[str, Any] = {}
        self.pool = ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="prepare")

    def where(self) -> dict[str, Any]:
        # Inside a Ray worker Ray is loaded already; outside one (the tests call the host directly)
        # there are no Ray GPUs, and importing Ray for that would cost seconds.
        ray = sys.modules.get("ray")
        try:
            gpus = [str(g) for g in ray.get_gpu_ids()] if ray is not None else []
        except Exception:  # Ray imported but not initialised in this process
            gpus = []
        return {"host": socket.gethostname(), "pid": os.getpid(), "gpus": gpus}

    def load(self) -> dict[str, Any]:
        if self.worker is None:
            worker = self.spec.build()
            self.info = worker.load()
            self.worker = worker
        return self.info

    def run(self, batch: Sequence[Item]) -> tuple[list[Any], float, dict[str, Any]]:
        """→ (one output per item, seconds spent, where the worker runs)."""
        started = time.perf_counter()
        self.load()
        keys = [key for key, _ in batch]
        prepared = list(self.pool.map(self.worker.prepare, [payload for _, payload in batch]))
        outputs = list(self.worker.run(keys, prepared))
        if len(outputs) != len(keys):
            raise RuntimeError(f"worker returned {len(outputs)} outputs for {len(keys)} items")
        return outputs, time.perf_counter() - started, self.where()


@dataclass
class _Pending:
    batch: list[Item]
    #: Workers known to have died running this batch.
    attempts: int = 0
    #: Give it to a worker with nothing else in hand, so that if that worker dies, this batch
    #: is known to be the one it died on.
    solo: bool = False
    #: Dispatch order: of the batches a dead worker had in hand, the oldest is the one it was
    #: running — unless that one had finished and its reply died with the process.
    seq: int = 0


@dataclass
class _Actor:
    name: str
    handle: Any
    stats: WorkerStats
    in_hand: list[Any] = field(default_factory=list)  # refs, in the order given
    alive: bool = True


class RayExecutor(Executor):
    """Ray actors as workers (docs/how-to/ray.md). ``address``: '' starts a Ray on this machine for the run
    (or uses the one this process started), 'auto' or 'HOST:PORT' joins a running cluster."""

    name = "ray"
    #: Batches a worker holds at once: one it runs, one waiting, so it never waits for the driver.
    batches_per_worker = 2

    def __init__(
        self,
        *,
        address: str = "",
        num_workers: int | None = None,
        num_gpus_per_worker: float = 0.0,
        num_cpus_per_worker: float = 1.0,
        max_attempts: int = 3,
        log: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.address = address
        self.num_workers = num_workers
        self.num_gpus_per_worker = num_gpus_per_worker
        self.num_cpus_per_worker = num_cpus_per_worker
        self.max_attempts = max_attempts
        #: Worker deaths a run survives (set by ``start``: at least 10, 3 per worker).
        self.max_worker_deaths = 0
        self.log = log
        self._ray: Any = None
        self._started_ray = False
        self._spec: WorkerSpec | None = None
        self._actor_class: Any = None
        self._actors: list[_Actor] = []
        self._spawned = 0
        self._deaths = 0
        self._dispatched = 0
        self._queue: collections.deque[_Pending] = collections.deque()
        self._refs: dict[Any, tuple[_Actor, _Pending]] = {}
        self._ready: collections.deque[BatchResult] = collections.deque()

    # --- start -----------------------------------------------------------------------------------
    def start(self, spec: WorkerSpec) -> dict[str, Any]:
        ray = self._ray = ray_import()
        if not ray.is_initialized():
            with _signal_handlers_kept():
                try:
                    ray.init(address=self.address or None, include_dashboard=False, logging_level="WARNING")
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
                    raise ExecutorError(f"Cannot start or join {where}: {exc}") from None
            self._started_ray = True
        n = self._workers_wanted(ray.cluster_resources())
        self.num_workers = n
        self.max_worker_deaths = max(10, 3 * n)
        self._spec = spec
        self._actor_class = ray.remote(WorkerHost)
        for _ in range(n):
            self._spawn()
        infos = [self._load(actor) for actor in self._actors]
        if any(info != infos[0] for info in infos):
            differing = "; ".join(
                f"worker {a.name}: {info}" for a, info in zip(self._actors, infos, strict=True)
            )
            raise ExecutorError(
                f"The workers disagree on what they loaded ({differing}): give every node the same "
                "packages and weights."
            )
        self.log(
            f"Ray: {n} worker(s) for {spec.label or spec.factory}, "
            f"{self.num_gpus_per_worker:g} GPU and {self.num_cpus_per_worker:g} CPU each."
        )
        return infos[0]

    def _workers_wanted(self, resources: dict[str, float]) -> int:
        """--num-workers, or as many as the cluster's GPUs (or CPUs) allow; checked against them."""
        gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 0.0)
        per_gpu, per_cpu = self.num_gpus_per_worker, self.num_cpus_per_worker
        n = self.num_workers
        if n is None:
            if per_gpu > 0:
                n = math.floor(gpus / per_gpu + 1e-9)
            elif per_cpu > 0:
                n = math.floor(cpus / per_cpu + 1e-9)
            else:
                n = 1
        short = [
            f"{n} x {per:g} {what} need {n * per:g}; the cluster has {have:g}"
            for per, have, what in ((per_gpu, gpus, "GPU"), (per_cpu, cpus, "CPU"))
            if per > 0 and n * per > have + 1e-9
        ]
        if n < 1 or short:
            raise ExecutorError(
                "Not enough resources for the Ray workers: "
                + ("; ".join(short) or f"the cluster has {gpus:g} GPU and {cpus:g} CPU")
                + ". Lower --num-workers or --num-gpus-per-worker / --num-cpus-per-worker, or add nodes."
            )
        return n

    def _spawn(self) -> _Actor:
        self._spawned += 1
        name = str(self._spawned)
        handle = self._actor_class.options(
            num_cpus=self.num_cpus_per_worker,
            num_gpus=self.num_gpus_per_worker,
            max_restarts=0,  # a dead worker is replaced by this executor, which knows its batches
            max_task_retries=0,
        ).remote(self._spec, name, worker_env())
        actor = _Actor(name=name, handle=handle, stats=WorkerStats(worker=name))
        self._actors.append(actor)
        return actor

    def _load(self, actor: _Actor) -> dict[str, Any]:
        ray = self._ray
        try:
            return ray.get(actor.handle.load.remote())
        except ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None
        except ray.exceptions.RayActorError as exc:
            raise ExecutorError(f"Ray worker {actor.name} died while loading the model: {exc}") from None

    # --- batches -----------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return max(1, (self.num_workers or 1) * self.batches_per_worker)

    @property
    def in_flight(self) -> int:
        return len(self._queue) + len(self._refs) + len(self._ready)

    def submit(self, batch: Sequence[Item]) -> None:
        self._queue.append(_Pending(batch=list(batch)))
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand out queued batches in order."""
        while self._queue:
            pending = self._queue[0]
            alive = [a for a in self._actors if a.alive]
            if pending.solo:
                candidates = [a for a in alive if not a.in_hand]
            else:
                candidates = [
                    a
                    for a in alive
                    if len(a.in_hand) < self.batches_per_worker
                    and not any(self._refs[ref][1].solo for ref in a.in_hand)
                ]
            if not candidates:
                return
            actor = min(candidates, key=lambda a: len(a.in_hand))
            self._queue.popleft()
            self._dispatched += 1
            pending.seq = self._dispatched
            ref = actor.handle.run.remote(pending.batch)
            self._refs[ref] = (actor, pending)
            actor.in_hand.append(ref)

    def next_result(self) -> BatchResult:
        while not self._ready:
            self._dispatch()
            if not self._refs:
                raise RuntimeError("next_result() with nothing in flight")
            (ref,), _ = self._ray.wait(list(self._refs), num_returns=1)
            actor, pending = self._take(ref)
            try:
                self._collect(actor, pending, ref)
            except self._lost_errors() as exc:
                self._lost(actor, pending, exc)
        return self._ready.popleft()

    def _lost_errors(self) -> tuple[type[BaseException], ...]:
        exceptions = self._ray.exceptions
        return (exceptions.RayActorError, exceptions.WorkerCrashedError)

    def _take(self, ref: Any) -> tuple[_Actor, _Pending]:
        actor, pending = self._refs.pop(ref)
        actor.in_hand.remove(ref)
        return actor, pending

    def _collect(self, actor: _Actor, pending: _Pending, ref: Any) -> None:
        """The batch's outputs join the ready results; raises the worker's own exception, or the
        Ray error that says the worker died."""
        try:
            outputs, seconds, where = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:  # raised by the worker: the run's error
            raise _cause(exc) from None
        stats = actor.stats
        stats.host, stats.pid, stats.gpus = where["host"], where["pid"], tuple(where["gpus"])
        stats.batches += 1
        stats.items += len(pending.batch)
        stats.busy_seconds += seconds
        keys = tuple(key for key, _ in pending.batch)
        self._ready.append(BatchResult(keys, tuple(outputs), actor.name, seconds))

    def _lost(self, actor: _Actor, first: _Pending, exc: BaseException) -> None:
        """``actor`` died with ``first`` in hand: replace it, and give its batches to others."""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        lost = [first]
        for ref in list(actor.in_hand):
            other_actor, pending = self._take(ref)
            ready, _ = self._ray.wait([ref], timeout=0)
            try:
                if not ready:
                    raise exc  # still "running" on a dead worker: it will never come back
                self._collect(other_actor, pending, ref)
            except self._lost_errors():
                lost.append(pending)
        actor.stats.lost_batches += len(lost)
        actor.alive = actor.stats.alive = False
        self._deaths += 1
        if self._deaths > self.max_worker_deaths:
            raise ExecutorError(
                f"{self._deaths} Ray workers died in this run (the last: {reason}); stopping. "
                "Nothing they had in hand was stored: a re-run picks it up."
            )
        with contextlib.suppress(Exception):  # usually dead already; make sure it stays so
            self._ray.kill(actor.handle)
        new = self._spawn()
        self.log(f"Ray worker {actor.name} died ({reason}); worker {new.name} replaces it.")
        lost.sort(key=lambda pending: pending.seq)
        for pending in lost:
            pending.solo = True
        blamed, waiting = lost[0], lost[1:]
        self._queue.extendleft(reversed(waiting))
        blamed.attempts += 1
        sure = not waiting
        if blamed.attempts < self.max_attempts or (len(blamed.batch) == 1 and not sure):
            self._queue.appendleft(blamed)
        elif len(blamed.batch) > 1:
            # Several workers died on this batch: try each item alone to find the one to blame.
            self.log(
                f"A batch of {len(blamed.batch)} killed {blamed.attempts} workers: trying its items one by one."
            )
            singles = [_Pending([item], attempts=self.max_attempts - 1, solo=True) for item in blamed.batch]
            self._queue.extendleft(reversed(singles))
        else:
            ((key, _),) = blamed.batch
            error = ItemError(
                f"worker died on this item ({blamed.attempts} attempts, the last alone): {reason}"
            )
            self._ready.append(BatchResult((key,), (error,), actor.name, 0.0))
        self._dispatch()

    def stats(self) -> list[WorkerStats]:
        return [actor.stats for actor in self._actors]

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        for actor in self._actors:
            with contextlib.suppress(Exception):  # already gone with its node: nothing to stop
                ray.kill(actor.handle)
        self._actors, self._refs = [], {}
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Put back the SIGINT/SIGTERM handlers ``ray.init`` replaces: it makes SIGTERM exit the driver at once,
    where the commands' StopFlag stores the batches in flight and marks the run interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def _cause(exc: Any) -> BaseException:
    """The exception a worker raised, as raised there (Ray wraps it in a RayTaskError)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
