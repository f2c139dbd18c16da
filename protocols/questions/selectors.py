"""Reads of the questions analysis: groups, final and individual answers, detectors' answers
and a drill-down's images, in a handful of queries."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Prefetch

from annotate.models import FinalLabel, Label
from detectors.kinds import answers_of
from detectors.models import PredictionStatus
from protocols.questions.spec import COMPARE, KIND_ANSWERS
from reports.selectors import PREDICTION_TO_ITEM, Scope, latest_detector_versions, predictions_in_scope
from studies.batching import IsIn, in_chunks
from studies.models import Item, Study

#: Manifest columns an item keeps in its own fields (or its prompt's) rather than in metadata.
CORE_COLUMNS = {
    "t2i_model": "t2i_model",
    "word": "prompt__word",
    "category": "prompt__category",
    "prompt": "prompt__text",
    "seed": "seed",
    "index": "index",
}


def compare_column(study: Study) -> str:
    """The manifest column whose values are the groups compared (``create_study --compare``)."""
    return str((study.parameters or {}).get(COMPARE, "") or "")


def group_of(item_values: dict[str, Any], column: str) -> str:
    """The item's group: its value in ``column`` (a core field or a metadata column), "" when
    it has none (an item imported before the study compared this column)."""
    if column in CORE_COLUMNS:
        value = item_values.get(CORE_COLUMNS[column])
    else:
        metadata = item_values.get("metadata")
        value = metadata.get(column) if isinstance(metadata, dict) else None
    return "" if value is None else str(value)


def item_groups(scope: Scope, column: str) -> dict[int, tuple[str, str]]:
    """item id -> (T2I model, group) of every item in scope. One query."""
    fields = ["id", "t2i_model", "metadata"]
    if column in CORE_COLUMNS and column != "t2i_model":
        fields.append(CORE_COLUMNS[column])
    return {
        row["id"]: (row["t2i_model"], group_of(row, column))
        for row in scope.items().order_by("id").values(*fields)
    }


def label_values(scope: Scope) -> dict[str, dict[int, list[str]]]:
    """question key -> item id -> every annotator's answer (the agreement's units). One query."""
    units: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for key, item_id, value in (
        Label.objects.filter(scope.q("item__"))
        .values_list("question__key", "item_id", "value")
        .order_by("pk")
    ):
        units[key][item_id].append(value)
    return {key: dict(by_item) for key, by_item in units.items()}


def detector_answers(
    scope: Scope, *, detector: str | None = None
) -> tuple[dict[str, str], dict[str, dict[int, dict[str, str]]]]:
    """(detector -> version reported, detector -> item id -> {question: answer}) of the
    latest version of every detector with ``answers`` predictions in scope (ok ones only)."""
    versions = latest_detector_versions(scope, kinds=[KIND_ANSWERS], detector=detector)
    answers: dict[str, dict[int, dict[str, str]]] = {name: {} for name in versions}
    for name, version, item_id, output in (
        predictions_in_scope(scope, kinds=[KIND_ANSWERS], detector=detector)
        .filter(status=PredictionStatus.OK)
        .values_list("detector", "version", F(f"{PREDICTION_TO_ITEM}id"), "output")
        .order_by()
    ):
        if versions.get(name) == version and isinstance(output, dict):
            answers[name][item_id] = answers_of(output)
    return versions, answers


@dataclass(frozen=True)
class AnswerImage:
    """One image of a drill-down (researchers only): the item, and every annotator's answer to
    the question as (annotator's username, answer)."""

    item: Item
    labels: list[tuple[str, str]]


def answer_items(
    scope: Scope, *, question_key: str, group: str, answer: str, limit: int
) -> tuple[list[AnswerImage], int]:
    """The first ``limit`` items of ``group`` whose final answer to the question is ``answer``,
    with their images and answers, and how many such items there are."""
    column = compare_column(scope.study)
    ids = [
        item_id for item_id, (_model, item_group) in item_groups(scope, column).items() if item_group == group
    ]
    matching: list[int] = []
    for chunk in in_chunks(ids):
        matching += FinalLabel.objects.filter(
            IsIn(F("item_id"), chunk), question__key=question_key, value=answer
        ).values_list("item_id", flat=True)
    matching.sort()
    rows: list[AnswerImage] = []
    for chunk in in_chunks(matching[:limit]):
        items = (
            Item.objects.filter(pk__in=chunk)
            .select_related("prompt")
            .prefetch_related(
                "item_images__image",
                Prefetch(
                    "labels",
                    queryset=Label.objects.filter(question__key=question_key)
                    .select_related("annotator")
                    .order_by("pk"),
                    to_attr="question_labels",
                ),
            )
            .order_by("id")
        )
        rows += [
            AnswerImage(
                item=item,
                labels=[(label.annotator.get_username(), label.value) for label in item.question_labels],
            )
            for item in items
        ]
    return rows, len(matching)
