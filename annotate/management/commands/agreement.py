"""``manage.py agreement``: thin wrapper around ``annotate.agreement.agreement_report``."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from annotate.agreement import agreement_report
from studies.errors import StudyNotChosen
from studies.models import Item, Question, Study
from studies.selectors import study_chosen, study_questions


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _known(values: Any) -> str:
    names = sorted({value for value in values if value})
    return ", ".join(names) or "none"


def study_for_slug(slug: str) -> Study:
    """The study with this slug; without one, the only study there is (``study_chosen``, what
    ``--study`` means in every command). CommandError naming the studies otherwise."""
    try:
        return study_chosen(slug)
    except StudyNotChosen as exc:
        raise CommandError(str(exc)) from None


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


def filters_check(study: Study, *, t2i_model: str | None, category: str | None) -> None:
    """CommandError when a T2I model or prompt category matches no item of the study, so a typo
    gets an answer instead of an empty report."""
    items = Item.objects.filter(study=study)
    if t2i_model and not items.filter(t2i_model=t2i_model).exists():
        known = _known(items.values_list("t2i_model", flat=True).distinct())
        raise CommandError(f"No items of T2I model '{t2i_model}' (T2I models: {known}).")
    if category and not items.filter(prompt__category=category).exists():
        known = _known(items.exclude(prompt=None).values_list("prompt__category", flat=True).distinct())
        raise CommandError(f"No items of prompt category '{category}' (categories: {known}).")


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
    for title, key in (("Per T2I model", "per_t2i_model"), ("Per category", "per_category")):
        lines += ["", f"{title}:"]
        for name, part in report[key].items():
            lines.append(
                f"  {name}: kappa {_num(part['cohen_kappa'])}, "
                f"agreement {_num(part['observed_agreement'])}, items {part['n_images']}"
            )
    lines += ["", "Per annotator pair:"]
    for part in report["per_annotator_pair"]:
        lines.append(
            f"  {' & '.join(part['annotators'])}: kappa {_num(part['cohen_kappa'])}, "
            f"agreement {_num(part['observed_agreement'])}, items {part['n_images']}"
        )
    return "\n".join(lines) + "\n"


class Command(BaseCommand):
    help = (
        "Agreement of a study's annotators on one question, over the items with two or more "
        "labels: Cohen's kappa (first two labels of each item by annotator id), observed "
        "agreement, confusion matrix, per T2I model / category / annotator pair, Fleiss' kappa "
        "and Krippendorff's alpha. JSON keys: study, question, question_text, labels, "
        "label_names, n_items (= n_images), cohen_kappa, observed_agreement, confusion, "
        "per_t2i_model, per_category, per_annotator_pair, fleiss_kappa, krippendorff_alpha "
        "(null = undefined)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--format", choices=("json", "text"), default="json", help="json (default) or text."
        )
        parser.add_argument("--study", default="", help="Study slug (default: the only study).")
        parser.add_argument(
            "--question", default="", help="Question key (default: the study's only question)."
        )
        parser.add_argument("--t2i-model", default="", help="Only items of this T2I model.")
        parser.add_argument("--category", default="", help="Only items of prompts in this category.")

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_for_slug(options["study"])
        question = question_for_key(study, options["question"])
        t2i_model, category = options["t2i_model"] or None, options["category"] or None
        filters_check(study, t2i_model=t2i_model, category=category)
        report = agreement_report(study=study, question=question, t2i_model=t2i_model, category=category)
        if options["format"] == "json":
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.stdout.write(agreement_text(report), ending="")
