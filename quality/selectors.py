"""Reads of quality control: gold accuracy per annotator, exclusions, the reliability page."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from annotate import selectors as annotate_selectors
from annotate.models import FinalLabel, GoldResponse, Label
from metrics.agreement import CohenKappa, confusion_matrix
from metrics.reliability import (
    GoldAccuracy,
    gold_accuracy,
    mean_kappa,
    pairwise_kappas,
    reliability_flagged,
)
from quality.models import AnnotatorExclusion, InferredReliability
from studies.models import Study
from studies.selectors import study_questions


def gold_scores(*, study: Study) -> dict[str, GoldAccuracy]:
    """Per annotator (username) who answered a gold item of the study: their gold answers,
    how many were right, the accuracy's Wilson interval and the study's rule's flag."""
    counts = (
        GoldResponse.objects.filter(item__study=study)
        .values("annotator__username")
        .annotate(n=Count("pk"), right=Count("pk", filter=Q(correct=True)))
        .order_by("annotator__username")
    )
    return {
        row["annotator__username"]: gold_accuracy(
            row["right"], row["n"], min_accuracy=study.min_gold_accuracy, min_gold=study.min_gold
        )
        for row in counts
    }


def excluded_annotators(*, study: Study) -> list[str]:
    """Usernames excluded from the study now, by name."""
    ids = AnnotatorExclusion.objects.filter(study=study, included_at__isnull=True).values("annotator_id")
    return sorted(get_user_model().objects.filter(pk__in=ids).values_list("username", flat=True))


@dataclass(frozen=True)
class AnnotatorReliability:
    """One annotator's row of the reliability page (``reliability_report``)."""

    username: str
    labels: int
    median_seconds: float | None
    gold: GoldAccuracy | None
    mean_kappa: float | None
    agreement_with_final: float | None
    answers_with_final: int
    reliability: float | None
    excluded: bool
    # Why the study's rule flags them (not excluded): "gold", "reliability", both or none.
    flag_reasons: tuple[str, ...]
    # question key → (answers in order, counts[true answer][their answer]): the model's expected
    # counts after a truth-inference run, else over their answers that have a final label.
    confusion: dict[str, tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]]


@dataclass(frozen=True)
class ReliabilityReport:
    rows: list[AnnotatorReliability]
    kappas: dict[tuple[str, str], CohenKappa]


def _answers_by_annotator(
    study: Study,
) -> tuple[dict[str, dict[tuple[int, int], str]], dict[tuple[int, int], str]]:
    """(annotator → (item, question) → answer, (item, question) → final answer) of the study."""
    answers: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
    for item_id, question_id, username, value in Label.objects.filter(item__study=study).values_list(
        "item_id", "question_id", "annotator__username", "value"
    ):
        answers[username][(item_id, question_id)] = value
    finals = {
        (item_id, question_id): value
        for item_id, question_id, value in FinalLabel.objects.filter(item__study=study).values_list(
            "item_id", "question_id", "value"
        )
    }
    return answers, finals


def reliability_report(*, study: Study) -> ReliabilityReport:
    """Per annotator of the study (members, anyone with labels, the excluded), by username: their
    figures, confusion matrices and the study's rule's flags (docs/explanation/reliability.md);
    and every pair's kappa."""
    model = {
        username: (reliability, confusion)
        for username, reliability, confusion in InferredReliability.objects.filter(study=study).values_list(
            "annotator__username", "reliability", "confusion"
        )
    }
    stats = {row.username: row for row in annotate_selectors.annotator_stats(study=study)}
    gold = gold_scores(study=study)
    excluded = set(excluded_annotators(study=study))
    answers, finals = _answers_by_annotator(study)
    questions = {question.pk: question for question in study_questions(study)}
    kappas = pairwise_kappas(answers)
    rows = []
    for username in sorted(set(stats) | set(gold) | excluded):
        stat = stats.get(username)
        own = answers.get(username, {})
        confusion: dict[str, tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]] = {}
        if username in model:  # the model's expected counts
            for key, table in model[username][1].items():
                confusion[key] = (
                    tuple(table["answers"]),
                    tuple(tuple(round(count, 1) for count in row) for row in table["counts"]),
                )
        else:  # their answers against the final labels
            for question in questions.values():
                pairs = [
                    (finals[unit], value)
                    for unit, value in own.items()
                    if unit[1] == question.pk and unit in finals
                ]
                if pairs:
                    truth, given = zip(*pairs, strict=True)
                    confusion[question.key] = confusion_matrix(truth, given, question.values)
        is_excluded = username in excluded
        score = gold.get(username)
        inferred = model[username][0] if username in model else None
        # The flag reads the model's reliability when it ran, else agreement with the finals.
        share: float | None = inferred
        n_answers = len(own)
        if inferred is None:
            share = stat.agreement_with_final if stat else None
            n_answers = stat.answers_with_final if stat else 0
        reasons = []
        if not is_excluded and score is not None and score.flagged:
            reasons.append("gold")
        if not is_excluded and reliability_flagged(
            share, n_answers, min_accuracy=study.min_gold_accuracy, min_n=study.min_gold
        ):
            reasons.append("reliability")
        rows.append(
            AnnotatorReliability(
                username=username,
                labels=stat.labels_done if stat else 0,
                median_seconds=stat.median_seconds if stat else None,
                gold=score,
                mean_kappa=mean_kappa(kappas, username),
                agreement_with_final=stat.agreement_with_final if stat else None,
                answers_with_final=stat.answers_with_final if stat else 0,
                reliability=inferred,
                excluded=is_excluded,
                flag_reasons=tuple(reasons),
                confusion=confusion,
            )
        )
    return ReliabilityReport(rows=rows, kappas=kappas)


#: CSV columns of the reliability export (a contract: docs/reference/contracts.md).
RELIABILITY_COLUMNS = (
    "annotator",
    "labels",
    "median_seconds",
    "gold_answers",
    "gold_correct",
    "gold_accuracy",
    "gold_low",
    "gold_high",
    "flagged",
    "mean_kappa",
    "agreement_with_final",
    "answers_with_final",
    "reliability",
    "excluded",
    "flag_reason",
)


def reliability_row(row: AnnotatorReliability) -> dict[str, Any]:
    """One annotator as the CSV and the API give them (``RELIABILITY_COLUMNS``)."""
    gold = row.gold
    return {
        "annotator": row.username,
        "labels": row.labels,
        "median_seconds": row.median_seconds,
        "gold_answers": gold.n if gold else 0,
        "gold_correct": gold.correct if gold else 0,
        "gold_accuracy": gold.accuracy if gold else None,
        "gold_low": gold.low if gold else None,
        "gold_high": gold.high if gold else None,
        "flagged": bool(row.flag_reasons),
        "mean_kappa": row.mean_kappa,
        "agreement_with_final": row.agreement_with_final,
        "answers_with_final": row.answers_with_final,
        "reliability": row.reliability,
        "excluded": row.excluded,
        "flag_reason": "+".join(row.flag_reasons),
    }
