"""``manage.py export_sampling``: every sampling round of a study, one row per (round, image)."""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from estimates import estimands
from estimates.selectors import export_rows
from studies.commands import (
    add_format_argument,
    add_output_argument,
    add_study_argument,
    output_write,
    study_from_options,
)
from studies.csvio import safe_dict_writer

COLUMNS = ("image", "round", "pi", "selected", "labelled")


class Command(BaseCommand):
    help = (
        "Export the sampling rounds of a study, one row per (round, image): image, round, pi, "
        "selected, labelled (CSV, or JSON objects with those keys)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(parser)
        add_format_argument(parser, "rows")
        add_output_argument(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_from_options(opts)
        spec = estimands.for_protocol(study.protocol)
        labelled = spec.labelled(study) if spec is not None and spec.labelled is not None else frozenset()
        rows = export_rows(study, labelled_items=labelled)
        if opts["format"] == "json":  # objects with the CSV's columns as keys, pi a number
            text = json.dumps([{**row, "pi": float(row["pi"])} for row in rows], indent=2) + "\n"
        else:
            buffer = io.StringIO()
            writer = safe_dict_writer(buffer, COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows({**row, "pi": repr(float(row["pi"]))} for row in rows)
            text = buffer.getvalue()
        output_write(text, opts["output"], self.stdout)
