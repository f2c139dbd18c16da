"""``manage.py import_ground_truth FILE.csv``: thin wrapper around ``annotate.imports.ground_truth_import``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from annotate.imports import LABEL_TABLES, ground_truth_import
from studies.commands import add_file_argument, add_study_argument, import_in_command, study_from_options


class Command(BaseCommand):
    help = (
        "Set final labels directly (e.g. a released dataset's ground truth) from a CSV with columns "
        "image (the manifest path of a one-image item) or item (the item key), label, optional note, "
        "question (required when the study asks more than one) and resolved_by (who decided) — or "
        "an export_ground_truth file (final_label column; answers without one are skipped). Every "
        "row is checked first; bad rows are reported by number and reason and then nothing is written."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_file_argument(parser, help="CSV file (UTF-8, header row).")
        add_study_argument(parser)
        parser.add_argument(
            "--user",
            default="",
            help="Username recorded as having decided the final labels whose row names nobody in resolved_by.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Check and apply every row, print what would change, then undo it all: nothing is written.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"no user named '{options['user']}'")
        study = study_from_options(options)
        summary = import_in_command(
            self,
            lambda meter: ground_truth_import(
                study=study,
                csv_path=options["file"],
                user=user,
                dry_run=options["dry_run"],
                stage_progress=meter,
            ),
            analyze=LABEL_TABLES,
        )
        for line in summary.lines("final labels"):
            self.stdout.write(line)
        if summary.rejected:
            raise CommandError(f"{len(summary.rejected)} row(s) rejected: nothing was imported.")
