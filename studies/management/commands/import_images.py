"""``manage.py import_images``: thin wrapper around ``studies.ingest.images_import``."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from studies.errors import DomainError
from studies.ingest import (
    DEFAULT_STUDY,
    MANIFEST_REQUIRED_COLUMNS,
    PAIR_MANIFEST_REQUIRED_COLUMNS,
    ImportSummary,
    images_import,
    study_get_or_create,
)


class Command(BaseCommand):
    help = (
        "Import images listed in a manifest CSV into a study. "
        f"Required columns: {', '.join(MANIFEST_REQUIRED_COLUMNS)} (pair-change studies: "
        f"{', '.join(PAIR_MANIFEST_REQUIRED_COLUMNS)}); optional: item (rows sharing it form one item), "
        "role (image, or input/output for pairs), seed, index, params (a JSON object), questions "
        "(the question keys the item asks, space-separated); any other column is kept as item metadata. "
        "'image' is a path relative to --root; paths leaving --root are refused. Every row is checked "
        "before anything is written; the good rows are written in one transaction (all or none: a "
        "failed write leaves no row and no file), bad rows are listed. Files are checked with Pillow, stored under "
        "their SHA-256 in MEDIA_ROOT and de-duplicated; re-running the same import changes nothing. "
        "Ends with a summary: accepted, duplicates, rejected rows with their reasons "
        "(exit status 1 when a row was rejected)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--manifest", required=True, help="Manifest CSV file (UTF-8, header row).")
        parser.add_argument(
            "--root", required=True, help="Folder the manifest's image paths are relative to."
        )
        parser.add_argument(
            "--study",
            default=DEFAULT_STUDY,
            help=(
                f"Slug of the study to import into (default: '{DEFAULT_STUDY}'). A missing study is "
                "created as a gender study (question: male / female / low_quality / other); "
                "create other kinds first with create_study."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        self.verbosity = int(options["verbosity"])
        try:
            study, created = study_get_or_create(slug=options["study"])
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        try:
            summary = images_import(
                study=study,
                manifest_path=options["manifest"],
                root=options["root"],
                progress=self._progress,
            )
        except DomainError as exc:
            if created:
                study.delete()  # the file was refused whole: leave no empty study behind
            raise CommandError(str(exc)) from exc
        if created and not study.items.exists():
            study.delete()  # every row was refused: leave no empty study behind
            created = False
            self.stdout.write(f"Nothing was imported: the study '{options['study']}' was not created.")
        elif created:
            self.stdout.write(f"Created study '{study.slug}' (gender protocol).")
        seconds = time.perf_counter() - started
        self.stdout.write(f"Import into study '{study.slug}' finished in {seconds:.1f} s")
        for line in summary.lines():
            self.stdout.write(line)
        if summary.rejected:
            # Rows were reported above; a non-zero status lets scripts notice without parsing text.
            raise CommandError(f"{len(summary.rejected)} row(s) rejected, see above.")

    def _progress(self, summary: ImportSummary, rows_done: int) -> None:
        if self.verbosity >= 2:
            self.stderr.write(
                f"  {rows_done} rows read: {summary.accepted} accepted, {summary.duplicates} duplicates, "
                f"{len(summary.rejected)} rejected"
            )
