"""``manage.py estimates_worker``: thin wrapper around ``estimates.services.estimate_jobs_work``."""

from __future__ import annotations

import os
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from estimates.services import estimate_jobs_work


class Command(BaseCommand):
    help = "Compute the queued few-label estimates (started by the estimate page and API when needed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            help="Poll for new jobs every SECONDS instead of exiting when the queue is empty.",
        )
        parser.add_argument(
            "--nice", type=int, default=0, help="Lower the worker's CPU priority by N (0 to 19)."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["nice"] > 0:
            os.nice(min(opts["nice"], 19))
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        done = estimate_jobs_work(keep_going=lambda: not stopping, wait=max(opts["wait"], 0.0))
        self.stdout.write(f"{done} estimate job(s) computed.")
