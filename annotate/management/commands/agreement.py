"""``manage.py agreement``: thin wrapper around ``reports.report.agreement_report``."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reports.report import agreement_report
from reports.selectors import UnknownFilter, check_filters, study_for_slug


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def agreement_text(report: dict[str, Any]) -> str:
    """The agreement report as plain text for a terminal."""
    labels = report["labels"]
    width = max([len(label) for label in labels] + [8])
    lines = [
        f"Images with two or more labels: {report['n_images']}",
        f"Cohen's kappa: {_num(report['cohen_kappa'])}",
        f"Observed agreement: {_num(report['observed_agreement'])}",
        f"Fleiss' kappa: {_num(report['fleiss_kappa'])}",
        f"Krippendorff's alpha (nominal): {_num(report['krippendorff_alpha'])}",
        "",
        "Confusion (rows: first annotator by id, columns: second):",
        " " * width + " " + " ".join(f"{label:>{width}}" for label in labels),
    ]
    for label, row in zip(labels, report["confusion"], strict=True):
        lines.append(f"{label:>{width}} " + " ".join(f"{n:>{width}}" for n in row))
    for title, key in (("Per T2I model", "per_t2i_model"), ("Per category", "per_category")):
        lines += ["", f"{title}:"]
        for name, part in report[key].items():
            lines.append(
                f"  {name}: kappa {_num(part['cohen_kappa'])}, "
                f"agreement {_num(part['observed_agreement'])}, images {part['n_images']}"
            )
    lines += ["", "Per annotator pair:"]
    for part in report["per_annotator_pair"]:
        lines.append(
            f"  {' & '.join(part['annotators'])}: kappa {_num(part['cohen_kappa'])}, "
            f"agreement {_num(part['observed_agreement'])}, images {part['n_images']}"
        )
    return "\n".join(lines) + "\n"


class Command(BaseCommand):
    help = (
        "Agreement of the annotators on images with two or more labels: Cohen's kappa (first two "
        "labels of each image by annotator id), observed agreement, confusion matrix, per T2I "
        "model / category / annotator pair, Fleiss' kappa and Krippendorff's alpha. JSON keys: "
        "cohen_kappa, observed_agreement, n_images, labels, confusion, per_t2i_model, "
        "per_category, per_annotator_pair, fleiss_kappa, krippendorff_alpha (null = undefined)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--format", choices=("json", "text"), default="json", help="json (default) or text."
        )
        parser.add_argument("--study", default="", help="Study slug (default: all studies together).")
        parser.add_argument("--t2i-model", default="", help="Only images of this T2I model.")
        parser.add_argument("--category", default="", help="Only images of prompts in this category.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            study = study_for_slug(options["study"])
            check_filters(
                study=study, t2i_model=options["t2i_model"] or None, category=options["category"] or None
            )
        except UnknownFilter as exc:
            raise CommandError(str(exc)) from exc
        report = agreement_report(
            study=study, t2i_model=options["t2i_model"] or None, category=options["category"] or None
        )
        if options["format"] == "json":
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.stdout.write(agreement_text(report), ending="")
