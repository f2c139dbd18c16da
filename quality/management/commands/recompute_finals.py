"""``manage.py recompute_finals --study S``: thin wrapper around ``quality.services.finals_recompute``."""

from __future__ import annotations

import getpass
from argparse import ArgumentParser
from typing import Any

from quality.services import finals_recompute
from studies.commands import DomainCommand, add_study_argument
from studies.models import AgreementRule
from studies.selectors import study_chosen


class Command(DomainCommand):
    help = (
        "Recompute a study's agreed final answers from its labels, optionally under another "
        "aggregation rule: an agreement rule (unanimous, majority) or a truth-inference model "
        "(dawid_skene, glad, mace; crowd-kit) whose most probable answer becomes final when its "
        "posterior reaches --min-posterior, else the question is a dispute. Researchers' decisions "
        "and imported final answers stay; every change is recorded. Run it after new labels when "
        "the rule is a model: the key press does not rerun it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_study_argument(parser)
        parser.add_argument(
            "--aggregation", choices=AgreementRule.values, help="The new rule (default: keep)."
        )
        parser.add_argument(
            "--min-posterior",
            type=float,
            metavar="P",
            help="Posterior a model's answer needs (default: keep).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_chosen(options["study"])
        done = finals_recompute(
            study=study,
            actor=f"shell user {getpass.getuser()}",
            rule=options["aggregation"],
            min_posterior=options["min_posterior"],
        )
        self.stdout.write(
            f"Study '{study.slug}' ({done.rule}): {done.changed} final answer(s) changed; "
            f"{done.agreed} agreed, {done.disputed} disputed."
        )
