"""Reads of the gender analysis, as plain rows (docs/explanation/protocols.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast

from django.db.models import F, FilteredRelation, Q, QuerySet
from django.db.models.fields.json import KT

from annotate.models import FinalLabel
from detectors.kinds import KIND_GENDER
from detectors.models import Prediction, PredictionStatus, Verdict
from metrics.gender import N_CLASSES, class_index
from reports.selectors import PREDICTION_TO_ITEM, Scope, latest_detector_versions
from studies.batching import IsIn, in_chunks
from studies.models import ItemImage, Prompt, Question, Study
from studies.protocols import protocol_spec

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

GENDER_QUESTION = "gender"
KINDS = (KIND_GENDER,)
# The first clear answer is compared with "male", the second with "female".
CLEAR_VERDICTS = (Verdict.MALE.value, Verdict.FEMALE.value)
FILTERED = Verdict.FILTERED.value


#: A final label as the report reads it: (item id, value, the item's T2I model, its prompt id).
FinalRow: TypeAlias = tuple[int, str, str, int | None]


def final_rows(scope: Scope, *, question: Question) -> list[FinalRow]:
    """The final labels of ``question`` on the items in scope: one read the human counts and the
    detector verdicts share."""
    return list(
        FinalLabel.objects.filter(scope.q("item__"), question=question).values_list(
            "item_id", "value", "item__t2i_model", "item__prompt_id"
        )
    )


def human_prompt_counts(
    study: Study, finals: Sequence[FinalRow], *, category: str | None = None
) -> list[dict[str, Any]]:
    """Final-label counts per (T2I model, prompt) of ``finals``, only of ``category``'s prompts
    when given; ordered by model, category, word."""
    # Only the prompts the final labels name (a study may hold a prompt per item), a chunk at a time.
    prompts: dict[int, tuple[str, str, str]] = {}
    for chunk in in_chunks(prompt_id for _, _, _, prompt_id in finals if prompt_id is not None):
        for pk, its_category, word, text in Prompt.objects.filter(
            IsIn(F("id"), chunk), study=study
        ).values_list("pk", "category", "word", "text"):
            prompts[pk] = (its_category or "", word or "", text or "")
    no_prompt = ("", "", "")
    rows: dict[tuple[str, int | None], dict[str, Any]] = {}
    for _item_id, value, model, prompt_id in finals:
        texts = prompts.get(prompt_id, no_prompt) if prompt_id is not None else no_prompt
        if category and (prompt_id is None or texts[0] != category):
            continue
        row = rows.get((model, prompt_id))
        if row is None:
            row = rows[(model, prompt_id)] = {
                "t2i_model": model,
                "prompt_id": prompt_id,
                "category": texts[0],
                "word": texts[1],
                "prompt": texts[2],
                "counts": {},
            }
        row["counts"][value] = row["counts"].get(value, 0) + 1
    return sorted(
        rows.values(), key=lambda r: (r["t2i_model"], r["category"], r["word"], r["prompt_id"] or 0)
    )


class FinalFields(TypedDict):
    """The annotations ``with_final`` adds to each prediction."""

    final_value: str | None
    output_label: str | None


# A prediction as ``with_final`` returns it (for type checkers: the annotations are attributes).
PredictionWithFinal: TypeAlias = "WithAnnotations[Prediction, FinalFields]"


def with_final(predictions: QuerySet[Prediction], *, question: Question) -> QuerySet[PredictionWithFinal]:
    """``predictions`` annotated with ``final_value`` (the item's final label) and ``output_label``."""
    # cast: a failed prediction's KT label is NULL, and "final" is a join alias, not a value.
    annotated = predictions.annotate(
        final=FilteredRelation(
            f"{PREDICTION_TO_ITEM}final_labels",
            condition=Q(**{f"{PREDICTION_TO_ITEM}final_labels__question": question}),
        ),
        final_value=F("final__value"),
        output_label=KT("output__label"),
    )
    return cast("QuerySet[PredictionWithFinal]", annotated)


def detector_joint_counts(
    scope: Scope, *, finals: Sequence[FinalRow], clear: Sequence[str], detector: str | None = None
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The reported version of each detector and per (detector, T2I model, prompt) the 3 x 3 table
    [human class][detector class] over the items of ``finals`` with an ``ok`` prediction."""
    versions = latest_detector_versions(scope, kinds=KINDS, detector=detector)
    by_item = {item_id: (value, model, prompt_id) for item_id, value, model, prompt_id in finals}
    roles = list(protocol_spec(scope.study.protocol).image_roles) if versions else []
    # Class of every value seen, looked up once (a million rows share a handful).
    human_class = {value: class_index(value, clear) for value, _, _ in by_item.values()}
    verdict_class: dict[str, int] = {}
    tables: dict[tuple[str, str, int | None], list[list[int]]] = {}
    for chunk in in_chunks(by_item) if versions else ():
        # Image files first, then their predictions: a join through the image table costs a probe per item.
        items_of: dict[int, list[int]] = {}
        for item_id, image_id in (
            ItemImage.objects.filter(IsIn(F("item_id"), chunk), role__in=roles)
            .order_by()
            .values_list("item_id", "image_id")
        ):
            items_of.setdefault(image_id, []).append(item_id)
        for images in in_chunks(items_of):
            for image_id, key, version, status, verdict in Prediction.objects.filter(
                IsIn(F("image_id"), images), kind__in=KINDS
            ).values_list("image_id", "detector", "version", "status", KT("output__label")):
                if versions.get(key) != version or status != PredictionStatus.OK or not verdict:
                    continue
                if verdict not in verdict_class:
                    verdict_class[verdict] = class_index(verdict, CLEAR_VERDICTS)
                for item_id in items_of[image_id]:
                    final, model, prompt_id = by_item[item_id]
                    table = tables.get((key, model, prompt_id))
                    if table is None:
                        table = tables[(key, model, prompt_id)] = [[0] * N_CLASSES for _ in range(N_CLASSES)]
                    table[human_class[final]][verdict_class[verdict]] += 1
    rows = [
        {"detector": d, "t2i_model": m, "prompt_id": p, "table": tables[(d, m, p)]}
        for d, m, p in sorted(tables, key=lambda k: (k[0], k[1], k[2] or 0))
    ]
    return versions, rows
