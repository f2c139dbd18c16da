"""``manage.py export_ground_truth``: thin wrapper around ``annotate.exchange.ground_truth_write``
(streamed: a chunk of items at a time, constant memory)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.exchange import EXPORT_FORMATS, ground_truth_write
from studies.errors import DomainError
from studies.progress import Progress, command_stream
from studies.selectors import study_chosen


class Command(BaseCommand):
    help = (
        "Export a study's ground truth, one row per (item, question) the study asks (unlabelled "
        "items with an empty final label): item, question, image (the item's first image; pair "
        "studies also input_image, output_image), t2i_model, category, word, prompt, seed, "
        "annotator_1, label_1, reason_1, …, final_label (that question's final answer), "
        "resolved_by, note. Writes to stdout unless --output is given."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="csv", help="csv (default) or json.")
        parser.add_argument(
            "--study",
            default="",
            help="Study slug (default: the only study; required when there are several).",
        )
        parser.add_argument("--output", default="", help="File to write (default: standard output).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            study = study_chosen(options["study"])
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        # A line with rows/s every 10 s on stderr once the export runs that long.
        meter = Progress(None, label="rows exported", stream=command_stream(self.stderr))
        if options["output"]:
            try:
                with open(options["output"], "w", encoding="utf-8", newline="") as out:
                    ground_truth_write(study=study, fmt=options["format"], out=out, progress=meter.advance)
            except OSError as exc:
                raise CommandError(f"cannot write {options['output']}: {exc.strerror or exc}") from exc
            finally:
                meter.close()
            self.stderr.write(f"Wrote {options['output']} ({study.items.count()} items).")
        else:
            ground_truth_write(
                study=study, fmt=options["format"], out=command_stream(self.stdout), progress=meter.advance
            )
            meter.close()
