"""``manage.py questions_demo``: a questions study made from the demo files it writes, by the
commands a researcher would run; running it again changes nothing."""

from __future__ import annotations

import tempfile
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from detectors.models import Prediction
from protocols.questions import demo
from studies.models import Item, Study


class Command(BaseCommand):
    help = (
        "Create the demo questions study 'demo-questions': 24 drawn figures compared by setting "
        "(office, street), two questions, two demo annotators' answers (one disputed image) and "
        "the made-up detector demo_judge's answers. The labels and answers are written for the "
        "demo, not measured. Running it again changes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--folder", help="Where to write the demo's files (default: a temporary folder).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["folder"]:
            self._run(Path(options["folder"]))
        else:
            with tempfile.TemporaryDirectory() as folder:
                self._run(Path(folder))

    def _run(self, folder: Path) -> None:
        paths = demo.folder_write(folder)
        quiet = {"stdout": self.stdout, "stderr": self.stderr, "verbosity": 0}
        call_command(
            "create_study",
            demo.SLUG,
            "--protocol",
            "questions",
            "--name",
            demo.NAME,
            "--questions",
            str(paths["questions"]),
            "--compare",
            "setting",
            "--labels-per-item",
            "2",
            **quiet,
        )
        # Its guidelines (create_study takes none); one changed by hand is kept.
        Study.objects.filter(slug=demo.SLUG, description="").update(description=demo.DESCRIPTION)
        call_command(
            "import_images",
            "--manifest",
            str(paths["manifest"]),
            "--root",
            str(paths["root"]),
            "--study",
            demo.SLUG,
            **quiet,
        )
        if not Item.objects.filter(study__slug=demo.SLUG, completed_seats__gt=0).exists():
            call_command(
                "import_labels", str(paths["labels"]), "--study", demo.SLUG, "--add-annotators", **quiet
            )
        if not Prediction.objects.filter(detector=demo.DETECTOR, kind="answers").exists():
            call_command("import_predictions", str(paths["predictions"]), "--study", demo.SLUG, **quiet)
        self.stdout.write(
            f"Demo study '{demo.SLUG}' is ready: /reports/?study={demo.SLUG} "
            f"({demo.DETECTOR}'s answers are made up for the demo)."
        )
