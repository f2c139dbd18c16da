"""Options and output shared by the long model commands (generate_images, edit_images,
run_detectors): one definition each, so the commands cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import fields
from typing import Any, TypeVar

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from detectors.executors import (
    Executor,
    ExecutorError,
    WorkerStats,
    executor_arguments,
    executor_from_options,
)
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


def pipeline_arguments(parser: CommandParser, *, send_images: bool = False) -> None:
    """``--device`` and ``--batch-size`` of a diffusers command, then where the work runs
    (``executor_arguments``: ``--executor``, ``--ray-address``, ``--num-workers`` …)."""
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, mps …")
    parser.add_argument("--batch-size", type=int, default=None, help="Default 8 on CUDA, 1 on CPU.")
    executor_arguments(parser, send_images=send_images)


def batch_size(opts: dict[str, Any]) -> int:
    """``--batch-size``, or the default for ``--device``: 8 on CUDA, 1 on a CPU (where a bigger
    batch only adds memory)."""
    return opts["batch_size"] or (8 if opts["device"].startswith("cuda") else 1)


def run_settings(cls: Callable[..., S], opts: dict[str, Any]) -> S:
    """A run's settings (a dataclass) from the options of the same names, ``batch_size`` as
    ``batch_size`` gives it."""
    names = [f.name for f in fields(cls) if f.name != "batch_size"]  # type: ignore[arg-type]
    return cls(**{name: opts[name] for name in names}, batch_size=batch_size(opts))


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
