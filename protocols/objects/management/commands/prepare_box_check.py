"""Put a detector's boxes on the items of an object co-occurrence study, for people to check
(``protocols.objects.services.box_check_prepare``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from protocols.objects.services import BoxCheckRefused, box_check_prepare
from studies.commands import add_study_argument, study_from_options

#: Refused item keys listed in full; beyond it the command says how many more.
SHOW_REFUSED = 20


class Command(BaseCommand):
    help = (
        "Copy each item's latest objects prediction of a detector into the item (metadata boxes), "
        "so annotators confirm or reject each box. Idempotent; items with labels keep their boxes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(parser, note="An object co-occurrence (objects) study.")
        parser.add_argument("--detector", required=True, help="Detector key, e.g. yolo_objects.")
        parser.add_argument(
            "--min-confidence",
            type=float,
            default=0.0,
            help="Only boxes with at least this confidence (0-1; default 0: every box stored).",
        )
        parser.add_argument(
            "--max-boxes",
            type=int,
            default=None,
            help="At most this many boxes per image, most confident first.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_from_options(opts)
        try:
            summary = box_check_prepare(
                study=study,
                detector=opts["detector"],
                min_confidence=opts["min_confidence"],
                max_boxes=opts["max_boxes"],
            )
        except BoxCheckRefused as exc:
            raise CommandError(str(exc)) from None
        sources = ", ".join(f"{source}: {n}" for source, n in summary.prepared.items())
        self.stdout.write(
            f"Prepared {summary.n_prepared} item(s) with {summary.n_boxes} box(es)"
            + (f" ({sources})" if sources else "")
            + f"; {summary.unchanged} already prepared; {summary.no_prediction} without a prediction "
            f"of {opts['detector']}."
        )
        if summary.refused:
            shown = ", ".join(summary.refused[:SHOW_REFUSED])
            more = len(summary.refused) - SHOW_REFUSED
            self.stderr.write(
                f"Kept the boxes of {len(summary.refused)} item(s) that already have labels (answers "
                f"are per box, in order): {shown}" + (f" … and {more} more" if more > 0 else "") + "."
            )
