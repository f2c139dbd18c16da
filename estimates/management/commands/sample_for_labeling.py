"""``manage.py sample_for_labeling``: thin wrapper around ``estimates.services.sampling_round_create``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from estimates.models import Design
from estimates.selectors import items_disputed
from estimates.services import SamplingError, sampling_round_create
from studies.commands import add_study_argument, study_from_options


class Command(BaseCommand):
    help = "Draw the next sampling round of a study for a detector and queue its images first."

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(
            parser, note="A study whose protocol has a few-label estimate (every built-in one)."
        )
        parser.add_argument("--detector", required=True, help="Detector key whose predictions set π.")
        parser.add_argument("--budget", required=True, type=int, help="Labels to spend: the sum of π.")
        parser.add_argument(
            "--design",
            default=Design.UNIFORM.value,
            choices=Design.values,
            help="uniform (default), active (needs an earlier finished round) or stratified (prompt x "
            "detector output, Neyman allocation).",
        )
        parser.add_argument(
            "--seed", type=int, default=None, help="Seed of the draw (default: random, stored)."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_from_options(opts)
        try:
            sampling_round = sampling_round_create(
                study=study,
                detector=opts["detector"],
                budget=opts["budget"],
                design=opts["design"],
                seed=opts["seed"],
            )
        except SamplingError as error:
            raise CommandError(f"--{error.field}: {error.message}") from None
        drawn = list(
            sampling_round.round_items.filter(selected=True, item__queue=2).values_list("item_id", flat=True)
        )
        disputed = len(items_disputed(study, drawn))
        parts = [f"{len(drawn) - disputed} queued first for labelling"]
        if disputed:
            parts.append(
                f"{disputed} disputed: they have all their labels and wait for a researcher to settle "
                "them (disputes page), not for labelling"
            )
        if sampling_round.n_already_labelled:
            parts.append(f"{sampling_round.n_already_labelled} already labelled (taken with certainty)")
        self.stdout.write(
            f"Round {sampling_round.number} of '{study.slug}' ({sampling_round.detector}@"
            f"{sampling_round.detector_version}, {sampling_round.design}, seed {sampling_round.seed}): "
            f"selected {sampling_round.n_selected} image(s): {'; '.join(parts)}."
        )
