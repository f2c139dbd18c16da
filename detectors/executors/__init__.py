"""Where the model work of a long command runs: in this process (local) or on a Ray cluster. The interface
lives in base.py, which ray_executor.py and workers.py import (this module imports ray_executor)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from detectors.executors.base import (
    EXECUTORS,
    RAY_INSTALL,
    BatchResult,
    Executor,
    ExecutorError,
    InlineExecutor,
    Item,
    ItemError,
    RayMissing,
    WorkerSpec,
    WorkerStats,
    batches_drive,
)

__all__ = [
    "EXECUTORS",
    "RAY_INSTALL",
    "BatchResult",
    "Executor",
    "ExecutorError",
    "InlineExecutor",
    "Item",
    "ItemError",
    "RayMissing",
    "WorkerSpec",
    "WorkerStats",
    "batches_drive",
    "executor_arguments",
    "executor_from_options",
]


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
