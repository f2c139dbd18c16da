"""``manage.py import_gold FILE --study S``: thin wrapper around ``quality.services.gold_import``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from quality.services import gold_import
from studies.commands import DomainCommand, add_file_argument, add_study_argument
from studies.selectors import study_chosen


class Command(DomainCommand):
    help = (
        "Make items gold items (attention checks with a known answer) from a CSV with columns "
        "image (the item's image path or key), question, answer. Gold items leave the ordinary "
        "queue and are served among the other items at the study's --gold-rate (create_study); "
        "what annotators answer on them never becomes a label. Every row is checked first: an "
        "unknown image, question or answer is reported by row and nothing is written."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_file_argument(parser, help="CSV file (UTF-8, header row: image, question, answer).")
        add_study_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_chosen(options["study"])
        result = gold_import(study=study, csv_path=options["file"])
        self.stdout.write(
            f"{result.items} gold item(s) in study '{study.slug}', {result.answers} gold answer(s) new or changed."
        )
        if not study.gold_rate:
            self.stdout.write(
                "The study's gold rate is 0: set one with create_study --gold-rate 0.1 to serve them."
            )
