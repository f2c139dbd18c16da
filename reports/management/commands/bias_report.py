"""``manage.py bias_report``: the study's report as its analysis builds it, as JSON, one CSV table
or Markdown."""

from __future__ import annotations

import csv
import io
import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reports.analyses import AnalysisError, NoAnalysis, analysis_of, report_options
from reports.selectors import Scope, UnknownFilter, check_filters, study_for_slug
from studies.commands import add_format_argument, add_output_argument, add_study_argument, output_write


class Command(BaseCommand):
    help = (
        "The report of a study, as its protocol defines it. For a gender study: bias of each T2I "
        "model by the human final labels and by every detector (latest version per detector), "
        "with filtering and accuracy — the paper's tables. --format json prints its JSON "
        "contract; csv prints the one table --table names (for a gender study models, detectors "
        "or prompts; without --table the command lists the study's tables); md prints Markdown "
        "tables."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_format_argument(parser, "report")
        add_study_argument(parser)
        parser.add_argument("--t2i-model", default="", help="Only images of this T2I model.")
        parser.add_argument("--detector", default="", help="Only this detector.")
        parser.add_argument(
            "--bootstrap",
            type=int,
            default=1000,
            help="Bootstrap resamples for the 95 %% intervals (0: none).",
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap (default 0).")
        # Options of one protocol's analysis (``Analysis.options``), e.g. --exclude-person.
        for flag, (option, _) in report_options().items():
            if option.value is None:
                parser.add_argument(flag, dest=option.keyword, default="", help=option.help)
            else:
                parser.add_argument(flag, dest=option.keyword, action="store_true", help=option.help)
        parser.add_argument(
            "--table",
            default="",
            metavar="NAME",
            help="With --format csv: the table to print (one header, one table per file). Left "
            "out or unknown, the command lists the tables of the study's report.",
        )
        add_output_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["bootstrap"] < 0:
            raise CommandError("--bootstrap must be 0 or more.")
        if options["table"] and options["format"] != "csv":
            raise CommandError("--table is for --format csv (json and md hold every table).")
        detector = options["detector"] or None
        try:
            study = study_for_slug(options["study"])
            scope = Scope(study, t2i_model=options["t2i_model"] or None)
            check_filters(scope, detector=detector)
            analysis = analysis_of(study)
        except (UnknownFilter, NoAnalysis, AnalysisError) as exc:
            raise CommandError(str(exc)) from exc
        if options["format"] == "csv" and options["table"] not in analysis.csv_tables:
            # Refused before the report is computed: naming the table costs nothing.
            problem = (
                f"The {study.protocol} report has no table {options['table']!r}"
                if options["table"]
                else "--format csv prints one table (tables of different columns in one file are misread)"
            )
            raise CommandError(
                f"{problem}: choose one with --table NAME, one of {', '.join(analysis.csv_tables)}; "
                "or --format json for all."
            )
        extra: dict[str, Any] = {}
        for flag, (option, protocols) in report_options().items():
            if not options[option.keyword]:
                continue
            if study.protocol not in protocols:
                raise CommandError(
                    f"{flag} is for {option.studies} studies (protocol {', '.join(protocols)})."
                )
            extra[option.keyword] = option.value if option.value is not None else options[option.keyword]
        try:
            result = analysis.compute(
                scope, detector=detector, bootstrap=options["bootstrap"], seed=options["seed"], **extra
            )
        except AnalysisError as exc:  # e.g. an objects study with several detectors and none chosen
            raise CommandError(str(exc)) from exc
        if options["format"] == "json":
            text = json.dumps(result.report, indent=2) + "\n"
        elif options["format"] == "csv":
            text = csv_table(analysis.export(result, "csv"), analysis.csv_tables, options["table"])
        else:
            text = analysis.export(result, options["format"])
        output_write(text, options["output"], self.stdout)


def csv_table(text: str, names: tuple[str, ...], name: str) -> str:
    """The table ``name`` of an analysis's CSV export ``text`` (tables ``names``, blank-line separated)."""
    tables: list[list[list[str]]] = [[]]
    for row in csv.reader(io.StringIO(text)):
        if row:
            tables[-1].append(row)
        else:
            tables.append([])
    if len(tables) != len(names):
        raise CommandError(f"The report's CSV holds {len(tables)} tables, not the {len(names)} it names.")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(tables[names.index(name)])
    return buffer.getvalue()
