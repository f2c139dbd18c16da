"""``manage.py export_ground_truth``: thin wrapper around ``annotate.exports.ground_truth_write``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from annotate.exports import ground_truth_write
from studies.commands import (
    add_format_argument,
    add_output_argument,
    add_study_argument,
    output_stream,
    study_from_options,
)
from studies.progress import Progress, command_stream


class Command(BaseCommand):
    help = (
        "Export a study's ground truth, one row per (item, question) the study asks (unlabelled "
        "items with an empty final label): item, question, image (the item's first image; pair "
        "studies also input_image, output_image), t2i_model, category, word, prompt, seed, "
        "annotator_1, label_1, reason_1, …, final_label (that question's final answer), "
        "resolved_by, note. Writes to stdout unless --output is given."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_format_argument(parser, "rows")
        add_study_argument(parser)
        add_output_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_from_options(options)
        # A line with rows/s every 10 s on stderr once the export runs that long.
        meter = Progress(None, label="rows exported", stream=command_stream(self.stderr))
        try:
            with output_stream(options["output"], self.stdout) as out:
                ground_truth_write(study=study, fmt=options["format"], out=out, progress=meter.advance)
        finally:
            meter.close()
        if options["output"]:
            self.stderr.write(f"Wrote {options['output']} ({study.items.count()} items).")
