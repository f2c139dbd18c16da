"""``manage.py export_ground_truth``: thin wrapper around ``annotate.exchange.ground_truth_export``."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.exchange import EXPORT_FORMATS, ground_truth_export, study_by_slug
from studies.errors import DomainError
from studies.ingest import DEFAULT_STUDY


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
            "--study", default=DEFAULT_STUDY, help=f"Study slug (default: '{DEFAULT_STUDY}')."
        )
        parser.add_argument("--output", default="", help="File to write (default: standard output).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            study = study_by_slug(options["study"])
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        text = ground_truth_export(study=study, fmt=options["format"])
        if options["output"]:
            try:
                Path(options["output"]).write_text(text, encoding="utf-8", newline="")
            except OSError as exc:
                raise CommandError(f"cannot write {options['output']}: {exc.strerror or exc}") from exc
            self.stderr.write(f"Wrote {options['output']} ({study.items.count()} items).")
        else:
            self.stdout.write(text, ending="")
