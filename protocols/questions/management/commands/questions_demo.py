"""``manage.py questions_demo``: the questions protocol's demo study alone, as ``seed_demo`` builds
it with the others (its annotators made without a password); running it again changes nothing."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from annotate.management.commands import seed_demo
from protocols.questions.demo import DEMO


class Command(seed_demo.Command):
    help = (
        "Create the demo questions study 'demo-questions': 24 drawn figures compared by setting "
        "(office, street), two questions, two demo annotators' answers (one disputed image) and "
        "the made-up detector demo_judge's answers. The labels and answers are written for the "
        "demo, not measured. Running it again changes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--folder", help="Where to write the demo's files (default: a temporary folder).")

    def handle(self, *args: Any, **options: Any) -> None:
        study = self._studies(lambda: {DEMO.slug: DEMO.define()})[DEMO.slug]
        self._build(DEMO, study, options["folder"])
        self.stdout.write(
            f"Demo study '{DEMO.slug}' is ready: /reports/?study={DEMO.slug} "
            f"({DEMO.detector}'s answers are made up for the demo)."
        )
