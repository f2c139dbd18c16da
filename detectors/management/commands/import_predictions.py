"""``manage.py import_predictions FILE.csv``: thin wrapper around ``detectors.imports.predictions_import``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detectors.imports import PredictionImportRejected, predictions_import
from detectors.models import Prediction
from studies.commands import add_file_argument, add_study_argument, study_filter_from_options
from studies.database import database_analyze
from studies.progress import StageProgress, command_stream


class Command(BaseCommand):
    help = (
        "Import predictions from a CSV file (validated as a whole; nothing is written on error). A row "
        "whose image already has a prediction of its detector and version with the same result is left "
        "as it is (counted as unchanged: re-importing a file changes nothing); with another result it "
        "is refused."
    )

    def add_base_argument(self, parser: CommandParser, *args: Any, **kwargs: Any) -> None:
        # Django's own --version (print Django's version) would shadow ours, the predictions' one.
        if "--version" in args:
            return
        super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        add_file_argument(
            parser, help="CSV with columns image, detector, prediction or output[, kind, score, reason …]."
        )
        add_study_argument(parser, every=True, note="Rows may name their own in a study column.")
        parser.add_argument(
            "--version", default="imported", help="Version stored for rows without one (default: imported)."
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Check every row and say what would be imported; write nothing.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_filter_from_options(opts)
        if not opts["version"].strip():
            raise CommandError("--version must not be empty")
        # A line with rows/s every 10 s on stderr once the import runs that long (both passes).
        meter = StageProgress(command_stream(self.stderr))
        try:
            summary = predictions_import(
                csv_path=opts["file"],
                study=study,
                version=opts["version"].strip(),
                dry_run=opts["dry_run"],
                progress=meter,
            )
        except PredictionImportRejected as exc:
            raise CommandError(
                f"Nothing imported: {len(exc.errors)} problem(s)\n" + "\n".join(exc.errors)
            ) from None
        finally:
            meter.close()
        if not opts["dry_run"]:
            # Planner statistics for the rows just written, marked visible (studies.database).
            database_analyze(models=[Prediction], vacuum=True)
        per = ", ".join(f"{name}: {n}" for name, n in sorted(summary.by_detector.items()))
        per = f" ({per})" if per else ""
        if opts["dry_run"]:
            self.stdout.write(
                f"Dry run: would import {summary.created} predictions{per}; nothing was written."
            )
        else:
            self.stdout.write(f"Imported {summary.created} predictions{per}.")
        if summary.unchanged:
            self.stdout.write(f"unchanged: {summary.unchanged} (stored already with the same result)")
