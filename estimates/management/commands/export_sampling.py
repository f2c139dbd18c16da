"""Export every sampling round of a study, one row per (round, image).

    python manage.py export_sampling --study S --format csv [--output FILE]

Columns, exactly: ``image`` (the path the image was imported under, as other exports name it),
``round`` (its number in the study), ``pi`` (inclusion probability, fixed before the draw),
``selected`` (1 if the draw took it) and ``labelled`` (1 if it has a final gender label now;
other protocols: every final label its estimate reads). A pair, which has no single image, is
named by its key.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from estimates import estimands
from estimates.management.commands._common import study_by_slug
from estimates.selectors import export_rows
from studies.csvio import safe_dict_writer

COLUMNS = ("image", "round", "pi", "selected", "labelled")


def sampling_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = safe_dict_writer(buffer, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**row, "pi": repr(float(row["pi"]))} for row in rows)
    return buffer.getvalue()


class Command(BaseCommand):
    help = "Export the sampling rounds of a study as CSV: image, round, pi, selected, labelled."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="Study slug.")
        parser.add_argument("--format", default="csv", choices=["csv"], help="csv (the only format).")
        parser.add_argument("--output", default="", help="Write to this file instead of standard output.")

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_by_slug(opts["study"])
        spec = estimands.for_protocol(study.protocol)
        labelled = spec.labelled(study) if spec is not None and spec.labelled is not None else None
        text = sampling_csv(export_rows(study, labelled_items=labelled))
        if opts["output"]:
            Path(opts["output"]).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
