"""The prediction-powered estimate of each T2I model's gender bias score (issue 13).

    python manage.py estimate_bias --study S --detector D [--format json|md|csv]
        [--bootstrap 1000] [--seed 0] [--output FILE]

JSON, per T2I model: ``model_bias_score`` {estimate, ci95, bias_corrected}, ``human_only``
{estimate, ci95, bias_corrected}, ``detector_only``, ``lambda`` (the detector's weight, power
tuning), ``effective_labels``, ``n_images``, ``n_labelled``, ``rounds``,
``prompts`` {prompt: {estimate, ci95, n_images, n_labelled}}, ``labels_for_half_width``, plus
``warnings`` and ``pending`` (rounds whose images still wait for final labels). Undefined
figures are null. Markdown and CSV give the per-model summary, whose ``estimate`` column is
the bias-corrected estimate (inside its interval) and ``plug_in`` the plug-in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from estimates.management.commands._common import study_by_slug
from estimates.selectors import bias_estimate
from estimates.summary import summary_csv, summary_markdown


class Command(BaseCommand):
    help = "Prediction-powered estimate of the gender bias score per T2I model, with 95 % intervals."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="Study slug (a gender study).")
        parser.add_argument("--detector", required=True, help="Detector key (its last-run version is used).")
        parser.add_argument("--format", default="json", choices=["json", "md", "csv"], help="Output format.")
        parser.add_argument(
            "--bootstrap", type=int, default=1000, help="Design-bootstrap replicates for the intervals."
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the bootstrap.")
        parser.add_argument("--output", default="", help="Write to this file instead of standard output.")

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_by_slug(opts["study"])
        if study.protocol != "gender":
            raise CommandError(f"--study: '{study.slug}' is not a gender study.")
        if opts["bootstrap"] < 0:
            raise CommandError("--bootstrap: must be >= 0.")
        try:
            estimate = bias_estimate(study, opts["detector"], n_boot=opts["bootstrap"], seed=opts["seed"])
        except LookupError as error:
            raise CommandError(f"--detector: {error}.") from None
        if opts["format"] == "json":
            text = json.dumps(estimate.as_json(), indent=2, sort_keys=False) + "\n"
        elif opts["format"] == "md":
            text = summary_markdown(estimate)
        else:
            text = summary_csv(estimate)
        if opts["output"]:
            Path(opts["output"]).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
        for state in estimate.pending:
            self.stderr.write(
                f"Round {state.round.number} is pending: {len(state.pending)} selected image(s) without a final label."
            )
