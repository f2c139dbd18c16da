"""``manage.py export_predictions``: write predictions out as CSV or JSON."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detectors.models import Prediction
from detectors.selectors import predictions_export
from studies.commands import (
    add_format_argument,
    add_output_argument,
    add_study_argument,
    output_write,
    study_filter_from_options,
)
from studies.selectors import known_values


class Command(BaseCommand):
    help = "Export predictions (all, or one detector / one study) as CSV or JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        add_format_argument(parser, "rows")
        parser.add_argument("--detector", default="", help="Only this detector.")
        add_study_argument(parser, every=True)
        add_output_argument(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_filter_from_options(opts)
        if opts["detector"]:
            stored = (
                Prediction.objects.all()
                if study is None
                else Prediction.objects.filter(image__item_images__item__study=study)
            )
            if not stored.filter(detector=opts["detector"]).exists():
                known = known_values(stored.values_list("detector", flat=True).distinct())
                raise CommandError(
                    f"No predictions of detector {opts['detector']!r}. Detectors with predictions: {known}."
                )
        text = predictions_export(fmt=opts["format"], detector=opts["detector"], study=study)
        output_write(text, opts["output"], self.stdout)
        if opts["output"]:
            self.stderr.write(f"Wrote {opts['output']}.")
