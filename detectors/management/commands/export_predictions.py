"""Write predictions out as CSV or JSON.

    python manage.py export_predictions --format csv [--detector clip] [--study gender] [--output FILE]

Columns (see detectors.selectors.EXPORT_COLUMNS): study, image (source_path as imported),
detector, version, prediction (male|female|filtered; empty for a failure), reason (filter
reason), scores (JSON object), detail (free text such as a raw answer), status (ok|failed),
error (why it failed), seconds (time spent on the image). The CSV can be re-imported with
``import_predictions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotate.models import Study
from detectors.models import Prediction
from detectors.selectors import predictions_export


class Command(BaseCommand):
    help = "Export predictions (all, or one detector / one study) as CSV or JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["csv", "json"], default="csv")
        parser.add_argument("--detector", default="", help="Only this detector.")
        parser.add_argument("--study", default="", help="Only images of this study.")
        parser.add_argument("--output", default="", help="File to write (default: standard output).")

    def handle(self, *args: Any, **opts: Any) -> None:
        study = None
        if opts["study"]:
            study = Study.objects.filter(slug=opts["study"]).first()
            if study is None:
                raise CommandError(f"No study {opts['study']!r}.")
        if opts["detector"]:
            stored = (
                Prediction.objects.all() if study is None else Prediction.objects.filter(image__study=study)
            )
            if not stored.filter(detector=opts["detector"]).exists():
                known = sorted(set(stored.values_list("detector", flat=True).distinct())) or ["none"]
                raise CommandError(
                    f"No predictions of detector {opts['detector']!r}. Detectors with predictions: "
                    f"{', '.join(known)}."
                )
        text = predictions_export(fmt=opts["format"], detector=opts["detector"], study=study)
        if not opts["output"]:
            self.stdout.write(text, ending="")
            return
        path = Path(opts["output"])
        if not path.parent.is_dir():
            raise CommandError(f"Folder {path.parent} does not exist.")
        path.write_text(text, encoding="utf-8")
        self.stderr.write(f"Wrote {path}.")
