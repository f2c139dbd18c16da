"""Run one detector over the image files that have no prediction for it yet."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detectors import registry
from detectors.base import DetectorOptionError, DetectorUnavailable, UnknownDetector
from detectors.executors import ExecutorError
from detectors.judges import StudyAskError
from detectors.management.options import (
    executor_arguments,
    executor_for,
    positive,
    shard_option,
    stoppable_run,
    workers_report,
)
from detectors.models import DetectorRun
from detectors.selectors import t2i_models
from detectors.services import detector_run
from studies.commands import add_study_argument, study_filter_from_options
from studies.models import Item, Study
from studies.selectors import known_values


class Command(BaseCommand):
    help = "Predict every image lacking a prediction for (detector, version); resumable and shardable."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--detector", required=True, help=f"One of: {', '.join(registry.available())}.")
        add_study_argument(parser, every=True)
        parser.add_argument("--t2i-model", default="", help="Only images of this T2I model.")
        parser.add_argument("--batch-size", type=int, default=8)
        parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps …")
        parser.add_argument("--shard", default="", help="i/n: this worker's share (1-based i).")
        parser.add_argument("--limit", type=int, default=None, help="Stop after this many images.")
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="A detector option (repeatable); VALUE is read as int, float, true/false or text. "
            "Options per detector:\n" + _options_help(),
        )
        executor_arguments(parser, send_images=True)
        parser.formatter_class = argparse.RawTextHelpFormatter

    def handle(self, *args: Any, **opts: Any) -> None:
        positive(opts, "batch_size", "limit")
        shard = shard_option(opts)
        options = parse_options(opts["option"])
        study = study_filter_from_options(opts)
        self._check_t2i_model(study, opts["t2i_model"])
        try:
            detector = registry.get(opts["detector"], device=opts["device"], **options)
        except (UnknownDetector, DetectorOptionError) as exc:  # the message names the detector (and options)
            raise CommandError(str(exc)) from None
        except (ValueError, TypeError) as exc:  # an option value the detector cannot use
            raise CommandError(f"{opts['detector']}: {exc}") from None
        except DetectorUnavailable as exc:
            raise CommandError(f"{opts['detector']} is unavailable: {exc}") from None
        except ImportError as exc:  # a plugin whose package is not installed here
            raise CommandError(f"{opts['detector']} cannot be imported here: {exc}") from None

        executor = executor_for(opts, stderr=self.stderr)

        try:
            outcome = stoppable_run(
                detector_run,
                executor=executor,
                stderr=self.stderr,
                errors=(ExecutorError, StudyAskError),  # StudyAskError: a judge without questions to ask
                detector=detector,
                study=study,
                t2i_model=opts["t2i_model"],
                shard=shard,
                batch_size=opts["batch_size"],
                limit=opts["limit"],
                send_images=opts["send_images"],
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
        if run.requests or run.cache_hits:
            self.stdout.write(run_usage_text(run))
        workers_report(self.stdout, outcome.workers)

    @staticmethod
    def _check_t2i_model(study: Study | None, t2i_model: str | None) -> None:
        """A mistyped model name must not read as "nothing to do"."""
        if not t2i_model:
            return
        items = Item.objects.all() if study is None else Item.objects.filter(study=study)
        if not items.filter(t2i_model=t2i_model).exists():
            known = known_values(t2i_models(study=study))
            raise CommandError(f"No images of T2I model {t2i_model!r}. T2I models: {known}.")


def run_usage_text(run: DetectorRun) -> str:
    """What a run behind a remote API spent: requests, cache hits, tokens and cost."""
    cost = f", ${run.cost_usd:.4f}" if run.cost_usd is not None else ""
    return (
        f"{run.requests} requests, {run.cache_hits} cache hits, {run.prompt_tokens} prompt + "
        f"{run.completion_tokens} completion tokens{cost}."
    )


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["face_upsample=1", "face_method=hog"]`` → ``{"face_upsample": 1, "face_method": "hog"}``."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise CommandError(f"--option wants KEY=VALUE, e.g. face_method=hog; got {pair!r}.")
        if key == "device":
            raise CommandError("Set the device with --device, not --option device=….")
        if key in options:
            raise CommandError(f"--option {key} is given twice.")
        options[key] = option_value(raw.strip())
    return options


def option_value(raw: str) -> int | float | bool | str:
    """The typed value of an option: int, float, true/false (any case), else the text itself."""
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return raw


def _options_help() -> str:
    """Every registered detector's option names, then what each option does (imports the plugin
    modules, which import neither torch nor dlib at module level)."""
    names: list[str] = []
    meanings: dict[tuple[str, str], list[str]] = {}
    for key in registry.available():
        try:
            help_by_option = registry.detector_class(key).option_help
        except ImportError as exc:  # a plugin outside the repo that cannot import here
            names.append(f"  {key}: cannot be imported here ({exc})")
            continue
        names.append(f"  {key}: {', '.join(sorted(help_by_option)) or 'no options'}")
        for name, text in help_by_option.items():
            meanings.setdefault((name, text), []).append(key)
    lines = [f"  {name} ({', '.join(keys)}): {text}" for (name, text), keys in sorted(meanings.items())]
    return "\n".join([*names, "What they do:", *lines])
