"""Run one detector over the images that have no prediction for it yet.

    python manage.py run_detectors --detector face_gender [--study gender] [--t2i-model sdxl]
        [--batch-size 8] [--device cuda] [--shard 1/4] [--limit 1000]

``--shard i/n`` (1-based i) gives this worker the images with ``id % n == i - 1``; n workers on
different machines started with 1/n … n/n cover every image exactly once. Ctrl-C or SIGTERM
stops after the current batch (the run is marked interrupted); running the same command again
continues, and once everything is predicted it does nothing and says so.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotate.models import Study
from detectors import registry
from detectors.base import DetectorUnavailable, UnknownDetector
from detectors.progress import Progress, StopFlag
from detectors.selectors import Shard
from detectors.services import detector_run


class Command(BaseCommand):
    help = "Predict every image lacking a prediction for (detector, version); resumable and shardable."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--detector", required=True, help=f"One of: {', '.join(registry.available())}.")
        parser.add_argument("--study", default="", help="Study slug (default: every study).")
        parser.add_argument("--t2i-model", default="", help="Only images of this T2I model.")
        parser.add_argument("--batch-size", type=int, default=8)
        parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps …")
        parser.add_argument("--shard", default="", help="i/n: this worker's share (1-based i).")
        parser.add_argument("--limit", type=int, default=None, help="Stop after this many images.")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if opts["limit"] is not None and opts["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        try:
            shard = Shard.parse(opts["shard"]) if opts["shard"] else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        study = self._study(opts["study"])
        try:
            detector = registry.get(opts["detector"], device=opts["device"])
        except UnknownDetector as exc:
            raise CommandError(str(exc)) from None
        except DetectorUnavailable as exc:
            raise CommandError(f"{opts['detector']} is unavailable: {exc}") from None
        except ImportError as exc:  # a plugin whose package is not installed here
            raise CommandError(f"{opts['detector']} cannot be imported here: {exc}") from None

        with StopFlag(stream=self.stderr._out) as stop:
            try:
                outcome = detector_run(
                    detector=detector,
                    study=study,
                    t2i_model=opts["t2i_model"],
                    shard=shard,
                    batch_size=opts["batch_size"],
                    limit=opts["limit"],
                    should_stop=stop,
                    progress=lambda total: Progress(total, stream=self.stderr._out),
                )
            except DetectorUnavailable as exc:
                raise CommandError(f"{opts['detector']} is unavailable: {exc}") from None
        if outcome.run is None:
            self.stdout.write(outcome.message)
            return
        run = outcome.run
        speed = run.images_per_second
        self.stdout.write(
            f"{run.detector}@{run.version} run {run.pk} {outcome.message}"
            + (f" {speed:.2f} images/s." if speed else "")
        )

    def _study(self, slug: str) -> Study | None:
        if not slug:
            return None
        try:
            return Study.objects.get(slug=slug)
        except Study.DoesNotExist:
            known = ", ".join(Study.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"No study {slug!r}. Studies: {known}.") from None
