"""Write predictions out as CSV or JSON.

    python manage.py export_predictions --format csv [--detector clip] [--study gender] [--output FILE]

One row per prediction of an image file. Columns (see detectors.selectors.EXPORT_COLUMNS):
study and image (the study and source path of the file's first item image: a seed photo shared
by many items is named once), detector, version, kind (gender, attributes, measurements,
objects), prediction (male|female|filtered for gender; empty for other kinds and failures),
reason (filter reason), scores (JSON object), detail (free text such as a raw answer), status
(ok|failed), error (why it failed), seconds (time spent on the image), output (the whole JSON
output of its kind). The CSV can be re-imported with ``import_predictions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detectors.models import Prediction
from detectors.selectors import predictions_export
from studies.selectors import study_by_slug


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
            study = study_by_slug(
                opts["study"], missing=lambda _known: CommandError(f"No study {opts['study']!r}.")
            )
        if opts["detector"]:
            stored = (
                Prediction.objects.all()
                if study is None
                else Prediction.objects.filter(image__item_images__item__study=study)
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
