"""``manage.py estimate_bias``: the prediction-powered estimate of a study's headline numbers."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from estimates import estimands
from estimates.selectors import estimate_options, estimate_state
from estimates.services import estimate_keep
from studies.commands import (
    add_format_argument,
    add_output_argument,
    add_study_argument,
    output_write,
    study_from_options,
)


class Command(BaseCommand):
    help = (
        "Prediction-powered estimate of the study's headline numbers (its protocol's), with 95 % intervals."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(
            parser, note="A study whose protocol has a few-label estimate (every built-in one)."
        )
        parser.add_argument("--detector", required=True, help="Detector key (its last-run version is used).")
        add_format_argument(parser, "report")
        parser.add_argument(
            "--bootstrap", type=int, default=1000, help="Design-bootstrap replicates for the intervals."
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap.")
        add_output_argument(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_from_options(opts)
        spec = estimands.for_protocol(study.protocol)
        if spec is None:
            raise CommandError(f"--study: {estimands.not_estimable(study)}.")
        if opts["bootstrap"] < 0:
            raise CommandError("--bootstrap: must be >= 0.")
        try:
            estimate = spec.report(study, opts["detector"], n_boot=opts["bootstrap"], seed=opts["seed"])
        except LookupError as error:
            raise CommandError(f"--detector: {error}.") from None
        # Kept for the estimate page, which shows it at once until it has computed its own.
        options = {"n_boot": opts["bootstrap"], "seed": opts["seed"], "history": False}
        estimate_keep(
            study=study,
            detector=opts["detector"],
            options=estimate_options(**options),
            state=estimate_state(study, protocol=spec.key, **options),
            report=estimate,
            history=False,
        )
        if opts["format"] == "json":
            text = json.dumps(estimate.as_json(), indent=2, sort_keys=False) + "\n"
        elif opts["format"] == "md":
            text = estimate.markdown()
        else:
            text = estimate.csv()
        output_write(text, opts["output"], self.stdout)
        for message in estimate.pending_messages():
            self.stderr.write(message)
