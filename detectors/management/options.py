"""Options and output shared by the long model commands (generate_images, edit_images,
run_detectors): one definition each, so the commands cannot drift apart."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import fields
from typing import Any, TypeVar

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from detectors.executors import EXECUTORS, RAY_INSTALL, Executor, ExecutorError, WorkerStats
from detectors.selectors import Shard
from studies.progress import Progress, StopFlag, command_stream

T = TypeVar("T")
S = TypeVar("S")


def positive(opts: dict[str, Any], *names: str, integer: bool = True) -> None:
    """CommandError unless each option of ``names`` is unset, at least 1 (``integer``) or at least 0."""
    for name in names:
        value = opts[name]
        if value is not None and (value < 1 if integer else value < 0):
            flag = "--" + name.replace("_", "-")
            raise CommandError(f"{flag} must be {'at least 1' if integer else 'zero or more'}")


def shard_option(opts: dict[str, Any]) -> Shard | None:
    """``--shard i/n`` as a ``Shard`` (None when not given), or a CommandError saying what is wrong."""
    try:
        return Shard.parse(opts["shard"]) if opts["shard"] else None
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def executor_arguments(parser: argparse.ArgumentParser, *, send_images: bool = False) -> None:
    """Add ``--executor``, ``--ray-address``, ``--num-workers``, ``--num-gpus-per-worker`` and
    ``--num-cpus-per-worker`` (and ``--send-images`` for commands that read images) to a command."""
    group = parser.add_argument_group("where the work runs (docs/how-to/ray.md)")
    group.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: this process (default). ray: a pool of Ray workers, each holding the model; "
        f"only this process writes the database. Needs `{RAY_INSTALL}`.",
    )
    group.add_argument(
        "--ray-address",
        default="",
        help="Ray cluster to join: 'auto' (the cluster this node belongs to) or HOST:PORT of its "
        "head. Default: start a Ray on this machine for the run.",
    )
    group.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="Ray workers (default: as many as the cluster's GPUs, or CPUs, allow).",
    )
    group.add_argument(
        "--num-gpus-per-worker",
        type=float,
        default=None,
        help="GPUs each Ray worker reserves (default: 1 with --device cuda, else 0; 0.5 puts two "
        "workers on one GPU).",
    )
    group.add_argument(
        "--num-cpus-per-worker", type=float, default=1.0, help="CPUs each Ray worker reserves (default 1)."
    )
    if send_images:
        group.add_argument(
            "--send-images",
            action="store_true",
            help="Read each image here and send its bytes to the workers (for workers without "
            "the shared MEDIA_ROOT; default: workers read MEDIA_ROOT themselves).",
        )


def executor_from_options(
    options: dict[str, Any], *, device: str, log: Callable[[str], None] = lambda text: None
) -> Executor | None:
    """The executor a command's options ask for; None for ``--executor local``. Raises ValueError for
    contradictory options and ``RayMissing`` without Ray (imported only here)."""
    ray_only = ("ray_address", "num_workers", "num_gpus_per_worker")
    if options.get("executor", "local") == "local":
        given = [f"--{name.replace('_', '-')}" for name in ray_only if options.get(name) not in (None, "")]
        if options.get("send_images"):
            given.append("--send-images")
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --executor ray.")
        return None
    if options.get("num_workers") is not None and options["num_workers"] < 1:
        raise ValueError("--num-workers must be at least 1")
    gpus = options.get("num_gpus_per_worker")
    if gpus is None:
        gpus = 1.0 if device.startswith("cuda") else 0.0
    if gpus < 0 or options.get("num_cpus_per_worker", 1.0) < 0:
        raise ValueError("--num-gpus-per-worker and --num-cpus-per-worker cannot be negative")
    if device.startswith("cuda:"):
        raise ValueError(
            "With --executor ray give --device cuda, not a numbered GPU: Ray gives each worker its own "
            "GPU(s) (CUDA_VISIBLE_DEVICES), which it sees as cuda:0."
        )
    if device.startswith("cuda") and gpus == 0:
        raise ValueError("--device cuda with --num-gpus-per-worker 0: the workers would reserve no GPU.")
    from detectors.executors.ray_executor import RayExecutor, ray_import

    ray_import()  # RayMissing now, before the command selects or reserves anything
    return RayExecutor(
        address=options.get("ray_address") or "",
        num_workers=options.get("num_workers"),
        num_gpus_per_worker=gpus,
        num_cpus_per_worker=options.get("num_cpus_per_worker", 1.0),
        log=log,
    )


def pipeline_arguments(parser: CommandParser, *, send_images: bool = False) -> None:
    """``--device`` and ``--batch-size`` of a diffusers command, then where the work runs
    (``executor_arguments``: ``--executor``, ``--ray-address``, ``--num-workers`` …)."""
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, mps …")
    parser.add_argument("--batch-size", type=int, default=None, help="Default 8 on CUDA, 1 on CPU.")
    executor_arguments(parser, send_images=send_images)


def run_settings(cls: Callable[..., S], opts: dict[str, Any]) -> S:
    """A run's settings (a dataclass) from the options of the same names; ``--batch-size`` defaults
    to 8 on CUDA, 1 on a CPU (where a bigger batch only adds memory)."""
    names = [f.name for f in fields(cls) if f.name != "batch_size"]  # type: ignore[arg-type]
    size = opts["batch_size"] or (8 if opts["device"].startswith("cuda") else 1)
    return cls(**{name: opts[name] for name in names}, batch_size=size)


def executor_for(opts: dict[str, Any], *, stderr: OutputWrapper) -> Executor | None:
    """The executor the options ask for (None: local), or a CommandError that says what to fix
    (contradictory options, Ray not installed). Call it before reading or writing anything."""
    try:
        return executor_from_options(opts, device=opts["device"], log=stderr.write)
    except (ValueError, ExecutorError) as exc:
        raise CommandError(str(exc)) from None


def workers_report(stdout: OutputWrapper, workers: Iterable[WorkerStats], label: str = "images") -> None:
    """One line per Ray worker (host, GPU, items, rate) after a run's summary; none for a local run."""
    for worker in workers:
        stdout.write("  " + worker.line(label))


def outcome_report(
    stdout: OutputWrapper, outcome: Any, *, nothing: str, done: str, label: str = "images"
) -> None:
    """A generation run's last lines: ``Nothing to do: {nothing}``, or ``Done: {done}`` (``Interrupted``) with
    its speed, then the workers' lines."""
    if outcome.created == 0 and not outcome.interrupted and not outcome.duplicates:
        stdout.write(f"Nothing to do: {nothing}")
        return
    speed = outcome.images_per_second
    state = "Interrupted" if outcome.interrupted else "Done"
    stdout.write(f"{state}: {done}" + (f", {speed:.3f} {label}/s." if speed else "."))
    workers_report(stdout, outcome.workers, label)


def stoppable_run(
    run: Callable[..., T],
    *,
    executor: Executor | None,
    stderr: OutputWrapper,
    errors: tuple[type[Exception], ...] = (ExecutorError,),
    label: str = "images",
    **kwargs: Any,
) -> T:
    """``run(**kwargs)`` with ``executor`` (started around it), a ``StopFlag`` (Ctrl-C / SIGTERM stop it after
    the current batch) and a progress meter of ``label`` on ``stderr``."""
    stream = command_stream(stderr)
    with StopFlag(stream=stream) as stop, executor or nullcontext():
        try:
            return run(
                **kwargs,
                should_stop=stop,
                progress=lambda total: Progress(total, label=label, stream=stream),
                executor=executor,
            )
        except errors as exc:
            raise CommandError(str(exc)) from None
