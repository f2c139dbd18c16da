"""Reads of quality control: gold accuracy per annotator, exclusions."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from annotate.models import GoldResponse
from metrics.reliability import GoldAccuracy, gold_accuracy
from quality.models import AnnotatorExclusion
from studies.models import GoldAnswer, Study


def gold_item_count(*, study: Study) -> int:
    return GoldAnswer.objects.filter(item__study=study).values("item_id").distinct().count()


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


def flagged_annotators(*, study: Study) -> list[str]:
    """Usernames the study's gold rule flags and that are not excluded yet, by name."""
    excluded = set(excluded_annotators(study=study))
    return [name for name, score in gold_scores(study=study).items() if score.flagged and name not in excluded]


def excluded_annotators(*, study: Study) -> list[str]:
    """Usernames excluded from the study now, by name."""
    ids = AnnotatorExclusion.objects.filter(study=study, included_at__isnull=True).values("annotator_id")
    return sorted(get_user_model().objects.filter(pk__in=ids).values_list("username", flat=True))
