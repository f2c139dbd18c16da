"""``manage.py import_labels FILE.csv``: thin wrapper around ``annotate.imports.labels_import``."""

from __future__ import annotations

import gc
from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.imports import LABEL_TABLES, labels_import
from studies.commands import add_file_argument, add_study_argument, import_in_command, study_from_options
from studies.database import bulk_page_cache, rows_mark_visible
from studies.models import Item

# Allocations between young collections of the garbage collector during the import (default 700).
_IMPORT_GC_THRESHOLD = 10_000


@contextmanager
def _collector_spaced() -> Iterator[None]:
    """Young collections less often for the block; the thresholds restored after it."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], _IMPORT_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


class Command(BaseCommand):
    help = (
        "Import annotators' labels from a CSV with columns image (the manifest path of a one-image "
        "item) or item (the item key), annotator (username, created as an annotator if missing), "
        "label, optional reason and question (the question key; required when the study asks more "
        "than one) — or an export_ground_truth file (annotator_i / label_i / reason_i columns). "
        "Every row is checked first; bad rows are reported by number and reason and then nothing "
        "is written. Re-importing the same file changes nothing. The summary counts new labels "
        "(accepted), changed answers (changed) and the items whose agreed final answer a change "
        "sent back to disputed (finals reopened). An existing researcher's or admin's account "
        "that is not an annotator of the study is refused unless --add-annotators."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_file_argument(parser, help="CSV file (UTF-8, header row).")
        add_study_argument(parser)
        parser.add_argument(
            "--add-annotators",
            action="store_true",
            help="Allow rows naming an existing researcher's or admin's account that is not an "
            "annotator of the study (they are made one); refused without this option.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Check and apply every row, print what would change, then undo it all: nothing is written.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_from_options(options)
        with _collector_spaced(), bulk_page_cache():
            summary = import_in_command(
                self,
                lambda meter: labels_import(
                    study=study,
                    csv_path=options["file"],
                    add_annotators=options["add_annotators"],
                    dry_run=options["dry_run"],
                    stage_progress=meter,
                ),
                analyze=LABEL_TABLES,
            )
        # The items' completed-seat counts were updated in place (studies.database).
        rows_mark_visible(models=[Item])
        for line in summary.lines("labels"):
            self.stdout.write(line)
        if summary.rejected:
            raise CommandError(f"{len(summary.rejected)} row(s) rejected: nothing was imported.")
