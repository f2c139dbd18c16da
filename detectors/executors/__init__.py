"""Where the model work of a long command runs: in this process (``InlineExecutor``) or on a Ray cluster
(``ray_executor``). Workers built from a ``WorkerSpec``, batches of ``(key, payload)`` items, ``BatchResult``s
and the driver's loop ``batches_drive``."""

from __future__ import annotations

import collections
import importlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

#: One unit of work: (key, payload). The key comes back with the output; the payload is plain
#: data the worker understands (a file path, image bytes, a generation job).
Item = tuple[Hashable, Any]

EXECUTORS = ("local", "ray")

#: What to run to add Ray to the project's virtualenv; every "Ray is missing" message names it.
RAY_INSTALL = ".venv/bin/pip install -r requirements-ray.txt"


class ExecutorError(Exception):
    """The executor cannot do its job: Ray missing, too few resources, workers that keep dying. The message is
    for the user and says what to do."""


class RayMissing(ExecutorError):
    """``--executor ray`` without Ray installed."""

    def __init__(self) -> None:
        super().__init__(
            f"--executor ray needs Ray, an optional dependency: install it with `{RAY_INSTALL}`."
        )


@dataclass(frozen=True)
class WorkerSpec:
    """How to build a worker where it runs: ``import_string(factory)(**kwargs)``, both picklable plain data;
    ``label`` names the work in messages."""

    factory: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def build(self) -> Any:
        """The worker object (not loaded yet: call its ``load()``)."""
        module_name, _, name = self.factory.rpartition(".")
        return getattr(importlib.import_module(module_name), name)(**self.kwargs)


@dataclass(frozen=True)
class ItemError:
    """The output for an item the worker could not handle, with the reason (stored by the driver)."""

    message: str
    #: Time spent before it failed, when the model was what failed.
    seconds: float | None = None


@dataclass(frozen=True)
class BatchResult:
    """What came back for one batch: one output per key, in the order submitted."""

    keys: tuple[Hashable, ...]
    outputs: tuple[Any, ...]
    worker: str
    #: Seconds the worker spent on the batch (reading, decoding, the model), not the round trip.
    seconds: float


@dataclass
class WorkerStats:
    """Per-worker figures of one run, printed at its end."""

    worker: str
    host: str = ""
    pid: int = 0
    gpus: tuple[str, ...] = ()
    batches: int = 0
    items: int = 0
    busy_seconds: float = 0.0
    #: Batches this worker had in hand when it died (each was given to another worker).
    lost_batches: int = 0
    alive: bool = True

    @property
    def items_per_second(self) -> float | None:
        """Items per second of the worker's own busy time; None before its first batch."""
        return self.items / self.busy_seconds if self.busy_seconds > 0 else None

    def line(self, label: str = "images") -> str:
        """``worker 2 on node-a pid 4711 GPU 1: 96 images in 12 batches, 8.41 images/s busy``."""
        where = f" on {self.host}" if self.host else ""
        where += f" pid {self.pid}" if self.pid else ""
        where += f" GPU {','.join(self.gpus)}" if self.gpus else ""
        rate = self.items_per_second
        text = f"worker {self.worker}{where}: {self.items} {label} in {self.batches} batches"
        text += f", {rate:.2f} {label}/s busy" if rate else ""
        if self.lost_batches:
            text += f", died with {self.lost_batches} batch(es) in hand (given to another worker)"
        return text


class Executor(ABC):
    """Runs batches on workers built from one spec."""

    name: str = ""

    @abstractmethod
    def start(self, spec: WorkerSpec) -> dict[str, Any]:
        """Build and load the workers; returns what ``load()`` said (the same on every worker)."""

    @property
    @abstractmethod
    def capacity(self) -> int:
        """How many batches to keep in flight so that no worker waits for the driver."""

    @abstractmethod
    def submit(self, batch: Sequence[Item]) -> None:
        """Hand one batch to a worker (never blocks on the work itself)."""

    @property
    @abstractmethod
    def in_flight(self) -> int:
        """Batches submitted and not yet returned by ``next_result``."""

    @abstractmethod
    def next_result(self) -> BatchResult:
        """Block until a batch is done and return it. A worker that died is replaced and its
        batch given to another; an exception the worker raised is re-raised here."""

    @abstractmethod
    def stats(self) -> list[WorkerStats]:
        """Per-worker figures so far."""

    @abstractmethod
    def close(self) -> None:
        """Stop the workers (and a Ray started for this run). Safe to call twice."""

    def drop_unstarted(self) -> None:
        """On a stop request: forget the batches submitted whose work has not begun (nothing more
        is computed, or paid for). By default every batch in flight is being worked on."""
        return None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineExecutor(Executor):
    """One worker in this process: ``worker`` (loaded already, no ``start``), or the one ``start``
    builds from the spec with ``extra`` joining its kwargs; payloads are prepared on other threads.
    The worker runs when the driver takes a result, or with ``background`` on a thread of its own,
    the next batch while the driver stores the last (a worker that reads the database must not)."""

    name = "local"
    capacity = 2

    def __init__(
        self, worker: Any = None, *, threads: int = 4, background: bool = False, **extra: Any
    ) -> None:
        self.worker = worker
        self.extra = extra
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="prepare")
        self.runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run") if background else None
        self._pending: collections.deque[
            tuple[tuple[Hashable, ...], list[Future[Any]], Future[BatchResult] | None]
        ]
        self._pending = collections.deque()

    def start(self, spec: WorkerSpec) -> dict[str, Any]:
        self.worker = WorkerSpec(spec.factory, {**spec.kwargs, **self.extra}).build()
        return self.worker.load()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def submit(self, batch: Sequence[Item]) -> None:
        keys = tuple(key for key, _ in batch)
        futures = [self.pool.submit(self.worker.prepare, payload) for _, payload in batch]
        job = self.runner.submit(self._run, keys, futures) if self.runner else None
        self._pending.append((keys, futures, job))

    def next_result(self) -> BatchResult:
        keys, futures, job = self._pending.popleft()
        return job.result() if job is not None else self._run(keys, futures)

    def _run(self, keys: tuple[Hashable, ...], futures: list[Future[Any]]) -> BatchResult:
        prepared = [future.result() for future in futures]
        started = time.perf_counter()
        outputs = self.worker.run(keys, prepared)
        return BatchResult(keys, tuple(outputs), self.name, time.perf_counter() - started)

    def stats(self) -> list[WorkerStats]:
        return []

    def drop_unstarted(self) -> None:
        if self.runner is None:  # a batch runs only when the driver takes it; a runner's are kept
            for _, futures, _ in self._pending:
                for future in futures:
                    future.cancel()
            self._pending.clear()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.runner:
            self.runner.shutdown(wait=True, cancel_futures=True)


def batches_drive(
    executor: Executor,
    batches: Iterator[Sequence[Item]],
    on_result: Callable[[BatchResult], None],
    *,
    should_stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Keep the executor full from ``batches`` and hand every result to ``on_result`` (the driver's database
    write). Returns True when ``batches`` ran out, False when stopped: then what was at work is
    stored, what had not begun is dropped (``Executor.drop_unstarted``)."""
    exhausted = stopped = False
    while True:
        while not (exhausted or stopped) and executor.in_flight < executor.capacity:
            if should_stop():
                stopped = True
                executor.drop_unstarted()
                break
            batch = next(batches, None)
            if not batch:
                exhausted = True
                break
            executor.submit(batch)
        if executor.in_flight == 0:
            return exhausted
        on_result(executor.next_result())
