"""The executor interface without Ray: the driver loop, the options, the workers on plain data."""

from __future__ import annotations

import io
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from detectors.executors import (
    RAY_INSTALL,
    BatchResult,
    Executor,
    InlineExecutor,
    ItemError,
    RayMissing,
    WorkerSpec,
    WorkerStats,
    batches_drive,
)
from detectors.executors.ray_executor import BLANKED_ENV, WorkerHost, worker_env
from detectors.executors.workers import ImageBytes, Predicted, image_open
from detectors.management.options import executor_from_options
from tests.factories import png_bytes
from tests.fakes import verdict_for


class ScriptedExecutor(Executor):
    """Runs each batch at once in this process; records what was in flight when."""

    name = "scripted"

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._queue: deque[BatchResult] = deque()
        self.max_in_flight = 0
        self.submitted: list[list[Any]] = []

    def start(self, spec: WorkerSpec) -> dict[str, Any]:
        return {}

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def submit(self, batch: Sequence[Any]) -> None:
        self.submitted.append(list(batch))
        keys = tuple(key for key, _ in batch)
        self._queue.append(BatchResult(keys, tuple(p * 10 for _, p in batch), "1", 0.0))
        self.max_in_flight = max(self.max_in_flight, len(self._queue))

    def next_result(self) -> BatchResult:
        return self._queue.popleft()

    def stats(self) -> list[WorkerStats]:
        return []

    def close(self) -> None:
        pass


def _batches(n: int, size: int = 2):
    return iter([[(i * size + j, i * size + j) for j in range(size)] for i in range(n)])


def test_the_driver_loop_stores_every_batch_and_keeps_at_most_capacity_in_flight():
    executor = ScriptedExecutor(capacity=3)
    results: list[BatchResult] = []
    assert batches_drive(executor, _batches(5), results.append) is True
    assert [r.keys for r in results] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert results[2].outputs == (40, 50)
    assert executor.max_in_flight == 3


def test_a_stop_request_submits_nothing_more_but_stores_what_is_in_flight():
    executor = ScriptedExecutor(capacity=2)
    results: list[BatchResult] = []
    stop = {"now": False}

    def store(result: BatchResult) -> None:
        results.append(result)
        stop["now"] = True  # Ctrl-C while the first batch is being stored

    assert batches_drive(executor, _batches(6), store, should_stop=lambda: stop["now"]) is False
    assert len(executor.submitted) == 2  # the first two were in flight when the stop came
    assert [r.keys for r in results] == [(0, 1), (2, 3)]  # both stored, nothing more


class _SteppedWorker:
    """Runs a batch only once the driver has stored the one before it (or at once, the first)."""

    def __init__(self) -> None:
        self.stored = [threading.Event() for _ in range(4)]
        self.ran_while_storing: list[int] = []

    def prepare(self, payload: int) -> int:
        return payload

    def run(self, keys: tuple[int, ...], prepared: list[int]) -> list[int]:
        batch = keys[0] // 2
        if batch and not self.stored[batch - 1].is_set():
            self.ran_while_storing.append(batch)
        return [10 * p for p in prepared]


@pytest.mark.parametrize("background", [True, False])
def test_a_background_inline_executor_runs_the_next_batch_while_the_driver_stores_the_last(background):
    worker = _SteppedWorker()
    results: list[BatchResult] = []

    def store(result: BatchResult) -> None:
        # Storing takes a while: long enough for a background worker to run the next batch.
        batch = result.keys[0] // 2
        if background and batch < 3:
            assert _wait_until(lambda: len(results) + 1 in worker.ran_while_storing)
        results.append(result)
        worker.stored[batch].set()

    with InlineExecutor(worker, background=background) as executor:
        assert batches_drive(executor, _batches(4), store) is True
    assert [r.outputs for r in results] == [(0, 10), (20, 30), (40, 50), (60, 70)]
    assert worker.ran_while_storing == ([1, 2, 3] if background else [])


class _CountingWorker:
    def __init__(self) -> None:
        self.ran: list[tuple[int, ...]] = []

    def prepare(self, payload: int) -> int:
        return payload

    def run(self, keys: tuple[int, ...], prepared: list[int]) -> list[int]:
        self.ran.append(keys)
        return prepared


def test_a_stop_request_runs_no_batch_of_the_local_executor_that_had_not_begun():
    worker = _CountingWorker()
    stop = {"now": False}

    def store(result: BatchResult) -> None:
        stop["now"] = True  # Ctrl-C while the first batch is being stored; the second one waits

    with InlineExecutor(worker) as executor:
        assert batches_drive(executor, _batches(6), store, should_stop=lambda: stop["now"]) is False
        assert executor.in_flight == 0
    assert worker.ran == [(0, 1)]


def _wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_local_executor_options_refuse_ray_only_flags():
    with pytest.raises(ValueError, match=r"--num-workers, --send-images only apply with --executor ray"):
        executor_from_options({"executor": "local", "num_workers": 2, "send_images": True}, device="cpu")
    assert executor_from_options({"executor": "local", "num_workers": None}, device="cpu") is None


@pytest.mark.parametrize(
    ("options", "device", "message"),
    [
        ({"num_workers": 0}, "cpu", "--num-workers must be at least 1"),
        ({}, "cuda:1", "give --device cuda, not a numbered GPU"),
        ({"num_gpus_per_worker": 0}, "cuda", "the workers would reserve no GPU"),
        ({"num_gpus_per_worker": -1}, "cpu", "cannot be negative"),
    ],
)
def test_ray_executor_options_that_contradict_each_other_are_refused(options, device, message):
    with pytest.raises(ValueError, match=message):
        executor_from_options({"executor": "ray", **options}, device=device)


def test_without_ray_the_error_names_the_command_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(
        RayMissing, match=r"install it with `\.venv/bin/pip install -r requirements-ray\.txt`"
    ):
        executor_from_options({"executor": "ray"}, device="cpu")


@pytest.mark.django_db
def test_run_detectors_without_ray_says_how_to_install_it_before_any_run(monkeypatch, study):
    from detectors.models import DetectorRun
    from tests.factories import ItemFactory, PromptFactory
    from tests.fakes import registered_fake

    ItemFactory(prompt=PromptFactory(study=study))
    monkeypatch.setitem(sys.modules, "ray", None)
    with registered_fake(), pytest.raises(CommandError, match=RAY_INSTALL.replace(".", r"\.")):
        call_command("run_detectors", "--detector", "fake", "--executor", "ray", stdout=io.StringIO())
    assert not DetectorRun.objects.exists()


@pytest.mark.django_db
def test_generate_images_refuses_ray_flags_with_the_local_executor(study):
    with pytest.raises(CommandError, match="--num-gpus-per-worker only apply with --executor ray"):
        call_command(
            "generate_images", "--t2i-model", "sdxl", "--prompt-set", "lyu2025", "--num-gpus-per-worker", "1"
        )


def test_workers_get_the_weights_settings_and_never_the_database(monkeypatch):
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", "/models/clip")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DATABASE_URL", "postgres://db/biaslab")
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    env = worker_env()
    assert (env["BIASLAB_CLIP_WEIGHTS"], env["HF_HUB_OFFLINE"]) == ("/models/clip", "1")
    assert all(env[name] == "" for name in BLANKED_ENV)
    assert {"DATABASE_URL", "DJANGO_SETTINGS_MODULE"} <= set(BLANKED_ENV)
    assert "SOMETHING_ELSE" not in env


def _spec() -> WorkerSpec:
    return WorkerSpec(
        factory="detectors.executors.workers.DetectorWorker",
        kwargs={"detector_class": "tests.fakes.FakeDetector", "options": {}, "device": "cpu"},
    )


def test_a_worker_host_predicts_a_batch_from_paths_and_bytes_in_order(tmp_path):
    from PIL import Image as PILImage

    paths = []
    for n in (1, 2, 3):
        path = tmp_path / f"{n}.png"
        path.write_bytes(png_bytes(n * 40))
        paths.append(path)
    host = WorkerHost(_spec(), "1", {})
    assert host.load() == {"detector": "fake", "version": "1"}
    batch = [(11, str(paths[0])), (12, ImageBytes(str(paths[1]), paths[1].read_bytes())), (13, str(paths[2]))]
    outputs, seconds, where = host.run(batch)
    assert [type(o) for o in outputs] == [Predicted, Predicted, Predicted]
    expected = [verdict_for(PILImage.open(p).convert("RGB")) for p in paths]
    # Plain data, whatever detectors.base the worker runs: the kind and the stored JSON object.
    assert [(o.kind, o.output) for o in outputs] == [("gender", e.as_output()) for e in expected]
    assert seconds > 0
    assert where["pid"] > 0


def test_a_corrupt_image_sent_as_bytes_fails_with_the_same_words_as_read_from_its_file(tmp_path: Path):
    path = tmp_path / "broken.png"
    path.write_bytes(b"not a png at all")
    from_file = image_open(str(path))
    from_bytes = image_open(ImageBytes(str(path), path.read_bytes()))
    assert from_file == from_bytes
    # Pillow's words depend on the openers other packages registered (ultralytics adds a HEIF one
    # that needs pi_heif): what matters is the same message, naming the file.
    assert from_file.startswith("cannot open image: ")
    assert str(path) in from_file or "pi_heif" in from_file


def test_a_worker_host_returns_unopenable_images_as_item_errors(tmp_path):
    host = WorkerHost(_spec(), "1", {})
    outputs, _, _ = host.run([(1, str(tmp_path / "missing.png"))])
    assert isinstance(outputs[0], ItemError)
    assert "No such file or directory" in outputs[0].message


def test_a_worker_line_says_where_it_ran_and_how_fast():
    stats = WorkerStats(
        worker="2", host="node-a", pid=4711, gpus=("1",), batches=12, items=96, busy_seconds=12.0
    )
    assert stats.line() == "worker 2 on node-a pid 4711 GPU 1: 96 images in 12 batches, 8.00 images/s busy"
    stats.lost_batches = 1
    assert stats.line().endswith("died with 1 batch(es) in hand (given to another worker)")
    assert WorkerStats(worker="3").items_per_second is None


def test_starting_ray_keeps_the_commands_stop_handlers():
    """ray.init makes SIGTERM exit the driver at once; the StopFlag's handler must survive it."""
    import signal

    from detectors.executors.ray_executor import _signal_handlers_kept

    def ours(signum, frame):  # pragma: no cover - never delivered
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with _signal_handlers_kept():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what ray.init does, in effect
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the Ray executor's retry rules, on a scripted stand-in for Ray ---------------------------------
class _ActorDied(Exception):
    pass


class _TaskError(Exception):
    pass


class _Ref:
    def __init__(self, value: Any = None, died: bool = False) -> None:
        self.value, self.died = value, died


class _Handle:
    """An actor that runs its batches at once; a batch holding a poison key kills it. With
    ``lose_reply`` the batch it finished just before dying loses its reply too."""

    def __init__(self, ray: _ScriptedRay, name: str) -> None:
        self.ray, self.name, self.dead, self.last = ray, name, False, None
        self.load = self.run = self  # handle.load.remote(...) / handle.run.remote(...)

    def remote(self, batch: Any = None) -> _Ref:
        if batch is None:  # load()
            return _Ref({"version": "1"})
        if self.dead:
            return _Ref(died=True)
        if any(key in self.ray.poison for key, _ in batch):
            self.dead = True
            if self.ray.lose_reply and self.last is not None and not self.last.taken:
                self.last.died = True
            return _Ref(died=True)
        self.ray.ran.append((self.name, [key for key, _ in batch]))
        ref = _Ref(([f"ok {key}" for key, _ in batch], 0.01, {"host": "h", "pid": 1, "gpus": []}))
        ref.taken = False
        self.last = ref
        return ref


class _ScriptedRay:
    def __init__(self, poison: set[int], lose_reply: bool) -> None:
        from types import SimpleNamespace

        self.poison, self.lose_reply = poison, lose_reply
        self.ran: list[tuple[str, list[int]]] = []
        self.exceptions = SimpleNamespace(
            RayActorError=_ActorDied, WorkerCrashedError=_ActorDied, RayTaskError=_TaskError
        )

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 8.0}

    def remote(self, cls: type) -> Any:
        ray = self

        class _Class:
            def options(self, **kwargs: Any) -> _Class:
                return self

            def remote(self, spec: Any, name: str, env: dict) -> _Handle:
                return _Handle(ray, name)

        return _Class()

    def wait(self, refs: list[_Ref], num_returns: int = 1, timeout: float | None = None):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: _Ref) -> Any:
        if ref.died:
            raise _ActorDied("The actor died unexpectedly before finishing this task.")
        ref.taken = True
        return ref.value

    def kill(self, handle: _Handle) -> None:
        handle.dead = True


def _run_scripted(batches: list[list[int]], *, poison: set[int], lose_reply: bool, max_attempts: int):
    from detectors.executors import ray_executor

    scripted = _ScriptedRay(poison, lose_reply)
    executor = ray_executor.RayExecutor(num_workers=1, max_attempts=max_attempts)
    original = ray_executor.ray_import
    ray_executor.ray_import = lambda: scripted
    try:
        executor.start(WorkerSpec(factory="x.Y"))
        outputs: dict[int, Any] = {}
        batches_drive(
            executor,
            iter([[(key, None) for key in batch] for batch in batches]),
            lambda result: outputs.update(zip(result.keys, result.outputs, strict=True)),
        )
    finally:
        ray_executor.ray_import = original
    return outputs, scripted.ran, executor.stats()


def test_a_poisonous_item_is_found_alone_and_only_it_fails():
    outputs, ran, stats = _run_scripted(
        [[1, 2], [3, 4], [5, 6]], poison={4}, lose_reply=False, max_attempts=2
    )
    assert {key: value for key, value in outputs.items() if isinstance(value, str)} == {
        k: f"ok {k}" for k in (1, 2, 3, 5, 6)
    }
    assert outputs[4].message.startswith("worker died on this item (2 attempts, the last alone)")
    # [3, 4] killed worker 1 (with [5, 6] waiting in its hands), then worker 2 alone; split, [3]
    # passed alone on worker 3 and [4] killed it; [5, 6], never blamed, passed on worker 4.
    assert ran == [("1", [1, 2]), ("3", [3]), ("4", [5, 6])]
    assert [s.alive for s in stats] == [False, False, False, True]


def test_an_item_whose_reply_died_with_its_worker_is_retried_not_blamed():
    # Batches of one; the worker finishes [1], starts the poisonous [2] and dies before [1]'s reply
    # leaves it. [1] is the oldest lost batch, the usual guess for the one running — a guess,
    # so even at its last attempt it is retried alone, and passes; [2] alone then kills a worker.
    outputs, ran, _ = _run_scripted([[1], [2], [3]], poison={2}, lose_reply=True, max_attempts=1)
    assert outputs[1] == "ok 1"
    assert outputs[3] == "ok 3"
    assert isinstance(outputs[2], ItemError)
    assert [keys for _, keys in ran].count([1]) == 2  # once with the lost reply, once alone


class _Declared:
    """Just what ``services._record`` reads of a detector."""

    key = "fake_measure"
    output_kind = declared_kind = "measurements"


def test_the_driver_stores_a_workers_output_of_another_kind_or_schema_as_that_files_failure():
    from detectors import services

    good = {"face": True, "age": 30.0, "gender": None, "skin_gray": 120.0}
    ok = services._record(_Declared(), 1, Predicted("measurements", good, 0.5))
    assert (ok.status, ok.kind, ok.output, ok.seconds) == ("ok", "measurements", good, 0.5)
    gender = {"label": "male", "reason": "", "scores": {}}
    wrong_kind = services._record(_Declared(), 2, Predicted("gender", gender, 0.1))
    assert (wrong_kind.status, wrong_kind.kind, wrong_kind.output) == ("failed", "measurements", {})
    assert wrong_kind.error == "fake_measure declares measurements output but returned gender"
    broken = services._record(_Declared(), 3, Predicted("measurements", {"face": "yes"}, 0.1))
    assert (broken.status, broken.kind) == ("failed", "measurements")
    assert broken.error.startswith("invalid measurements output: ")
    lost = services._record(_Declared(), 4, ItemError("worker died on this item", 2.0))
    assert (lost.status, lost.kind, lost.error, lost.seconds) == (
        "failed",
        "measurements",
        "worker died on this item",
        2.0,
    )
