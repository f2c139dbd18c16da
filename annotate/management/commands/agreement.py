"""``manage.py agreement``: thin wrapper around ``annotate.agreement.agreement_report``."""

from __future__ import annotations

import io
import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.agreement import agreement_report
from studies.commands import (
    add_format_argument,
    add_output_argument,
    add_study_argument,
    output_write,
    study_from_options,
)
from studies.csvio import safe_writer
from studies.models import Question, Study
from studies.selectors import filter_problem, study_questions


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def question_for_key(study: Study, key: str) -> Question:
    """The study's question with this key; without one, its only question."""
    questions = study_questions(study)
    keys = ", ".join(q.key for q in questions)
    if key:
        question = next((q for q in questions if q.key == key), None)
        if question is None:
            raise CommandError(f"The study '{study.slug}' has no question '{key}' (questions: {keys}).")
        return question
    if len(questions) != 1:
        raise CommandError(
            f"The study '{study.slug}' asks {len(questions)} questions: choose one with --question ({keys})."
        )
    return questions[0]


#: The figures of one group (a T2I model, a category, an annotator pair) in csv and md.
GROUP_COLUMNS = ("by", "name", "n_items", "cohen_kappa", "observed_agreement")
GROUP_TITLES = {
    "t2i_model": "Per T2I model",
    "category": "Per category",
    "annotator_pair": "Per annotator pair",
}
#: The study-wide coefficients (csv and md).
FIGURES = ("cohen_kappa", "observed_agreement", "fleiss_kappa", "krippendorff_alpha")


def _groups(report: dict[str, Any]) -> list[tuple[str, str, int, float | None, float | None]]:
    """Rows of ``GROUP_COLUMNS``: per T2I model, per category, per annotator pair (``a & b``)."""
    parts = [(by, name, p) for by in ("t2i_model", "category") for name, p in report[f"per_{by}"].items()]
    parts += [("annotator_pair", " & ".join(p["annotators"]), p) for p in report["per_annotator_pair"]]
    return [(by, name, p["n_images"], p["cohen_kappa"], p["observed_agreement"]) for by, name, p in parts]


def agreement_text(report: dict[str, Any]) -> str:
    """The agreement report as plain text for a terminal."""
    labels = report["labels"]
    width = max([len(label) for label in labels] + [8])
    lines = [
        f"Study {report['study']}, question {report['question']}: {report['question_text']}",
        f"Items with two or more labels: {report['n_items']}",
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
    groups = _groups(report)
    for by, title in GROUP_TITLES.items():
        lines += ["", f"{title}:"]
        lines += [
            f"  {name}: kappa {_num(kappa)}, agreement {_num(observed)}, items {n}"
            for group, name, n, kappa, observed in groups
            if group == by
        ]
    return "\n".join(lines) + "\n"


def agreement_csv(report: dict[str, Any]) -> str:
    """The agreement report as CSV sections (``summary``, ``confusion``, ``groups``)."""
    out = io.StringIO()
    writer = safe_writer(out, lineterminator="\n")
    writer.writerow(("section", "study", "question", "n_items", *FIGURES))
    writer.writerow(
        ("summary", report["study"], report["question"], report["n_items"], *(report[f] for f in FIGURES))
    )
    out.write("\n")
    writer.writerow(("section", "first", *report["labels"]))
    for label, row in zip(report["labels"], report["confusion"], strict=True):
        writer.writerow(("confusion", label, *row))
    out.write("\n")
    writer.writerow(("section", *GROUP_COLUMNS))
    for row in _groups(report):
        writer.writerow(("groups", *row))
    return out.getvalue()


def agreement_markdown(report: dict[str, Any]) -> str:
    """The agreement report as Markdown tables ("n/a" = undefined)."""

    def table(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
        cells = [head, *[tuple(str(cell).replace("|", "\\|") for cell in row) for row in rows]]
        return [
            "| " + " | ".join(cells[0]) + " |",
            "| " + " | ".join("---" for _ in head) + " |",
            *["| " + " | ".join(row) + " |" for row in cells[1:]],
        ]

    lines = [
        f"# Agreement: study {report['study']}, question {report['question']}",
        "",
        report["question_text"],
        "",
        *table(
            (
                "Items with two or more labels",
                "Cohen's kappa",
                "Observed agreement",
                "Fleiss' kappa",
                "Krippendorff's alpha",
            ),
            [(report["n_items"], *(_num(report[f]) for f in FIGURES))],
        ),
        "",
        "## Confusion (rows: first annotator by id, columns: second)",
        "",
        *table(
            ("", *report["label_names"]),
            [(name, *row) for name, row in zip(report["label_names"], report["confusion"], strict=True)],
        ),
        "",
        "## Per T2I model, category and annotator pair",
        "",
        *table(
            ("By", "Name", "Items", "Cohen's kappa", "Observed agreement"),
            [(by, name, n, _num(kappa), _num(observed)) for by, name, n, kappa, observed in _groups(report)],
        ),
    ]
    return "\n".join(lines) + "\n"


class Command(BaseCommand):
    help = (
        "Agreement of a study's annotators on one question, over the items with two or more "
        "labels: Cohen's kappa (first two labels of each item by annotator id), observed "
        "agreement, confusion matrix, per T2I model / category / annotator pair, Fleiss' kappa "
        "and Krippendorff's alpha. JSON keys: study, question, question_text, labels, "
        "label_names, n_items (= n_images), cohen_kappa, observed_agreement, confusion, "
        "per_t2i_model, per_category, per_annotator_pair, fleiss_kappa, krippendorff_alpha "
        "(null = undefined). --format csv prints the sections summary, confusion and groups (per "
        "T2I model, category, annotator pair), each with a header row starting with 'section'; md "
        "the same as Markdown tables."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_format_argument(
            parser, "report", aliases={"text": "the plain-text summary it printed before md existed"}
        )
        add_study_argument(parser)
        parser.add_argument(
            "--question", default="", help="Question key (default: the study's only question)."
        )
        parser.add_argument("--t2i-model", default="", help="Only items of this T2I model.")
        parser.add_argument("--category", default="", help="Only items of prompts in this category.")
        add_output_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_from_options(options)
        question = question_for_key(study, options["question"])
        t2i_model, category = options["t2i_model"] or None, options["category"] or None
        problem = filter_problem(study, t2i_model=t2i_model, category=category)
        if problem:
            raise CommandError(problem[1])
        report = agreement_report(study=study, question=question, t2i_model=t2i_model, category=category)
        render = {
            "json": lambda r: json.dumps(r, indent=2) + "\n",
            "csv": agreement_csv,
            "md": agreement_markdown,
            "text": agreement_text,
        }[options["format"]]
        output_write(render(report), options["output"], self.stdout)
