"""Reads of the attributes (GEP) analysis, as plain data for ``metrics.gep``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import NotSupportedError
from django.db.models import Count, F, FilteredRelation, Lookup, Q, QuerySet, Window
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber

from annotate.models import Label
from detectors.kinds import KIND_ATTRIBUTES
from detectors.models import Prediction, PredictionStatus
from metrics import gep, gep_design
from protocols.attributes.spec import gep_metadata_problem
from reports.selectors import (
    PREDICTION_TO_ITEM,
    LeftOut,
    Scope,
    item_answers_prefetches,
    latest_detector_versions,
    of_versions,
    predictions_in_scope,
)
from studies.batching import IsIn, in_chunks
from studies.models import ImageRole, Item, ItemImage, Question
from studies.selectors import item_main_image

KINDS = (KIND_ATTRIBUTES,)


@dataclass(frozen=True)
class GepRows:
    """What ``metrics.gep_agreement.gep_study`` reads (items per T2I model, detector versions), and
    the items left out with their reason."""

    items_by_model: dict[str, list[gep.GepItem]]
    versions: dict[str, str]
    left_out: tuple[LeftOut, ...] = field(default_factory=tuple)

    @property
    def n_items(self) -> int:
        return sum(len(items) for items in self.items_by_model.values())


def metadata_problem(metadata: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    """Why an item cannot enter the GEP comparison, or None."""
    problem = gep_metadata_problem({k: str(v) for k, v in metadata.items()})
    if problem:
        return problem
    fields = _item_metadata(metadata)
    setting, attribute = fields["setting"] or "", fields["attribute"] or ""
    if not fields["gender"]:
        return "no metadata gender (woman or man)"
    if setting not in gep_design.SETTINGS:
        shown = repr(setting) if setting else "none"
        return f"metadata setting {shown} is not one of {', '.join(gep_design.SETTINGS)}"
    if setting == gep_design.EXPLICIT and attribute not in keys:
        return f"attribute {attribute!r} is not a question of the study"
    if setting == gep_design.NEUTRAL and attribute:
        return f"a neutral item names an attribute ({attribute!r})"
    return None


def _item_metadata(metadata: Mapping[str, Any]) -> dict[str, str | None]:
    """The three fields ``GepItem.from_metadata`` reads, stripped (a CSV cell may hold spaces)."""
    return {
        "gender": str(metadata.get("gender", "")).strip(),
        "setting": str(metadata.get("setting", "")).strip(),
        "attribute": str(metadata.get("attribute", "") or "").strip() or None,
    }


def gep_rows(
    scope: Scope,
    *,
    keys: Sequence[str],
    answers: Mapping[int, Mapping[str, str]],
    detector: str | None = None,
) -> GepRows:
    """The items in scope (T2I model filter applied, category not) as GEP items with their final
    answers and the latest ``ok`` scores of each detector."""
    scope = Scope(scope.study, t2i_model=scope.t2i_model)
    key_set = set(keys)
    versions = latest_detector_versions(scope, kinds=KINDS, detector=detector)  # the latest of each
    scores: dict[int, dict[str, dict[str, float | None]]] = defaultdict(dict)
    if versions:
        predictions = (
            predictions_in_scope(scope, kinds=KINDS)
            .filter(of_versions(versions), status=PredictionStatus.OK)
            .values_list("detector", F(f"{PREDICTION_TO_ITEM}id"), "output")
            .order_by()
        )
        for name, item_id, output in predictions:
            by_key = (output or {}).get("scores") or {}
            scores[item_id][name] = {k: v for k, v in by_key.items() if k in key_set}
    by_model: dict[str, list[gep.GepItem]] = defaultdict(list)
    left_out = []
    for item_id, item_key, model, metadata in (
        scope.items().order_by("t2i_model", "id").values_list("id", "key", "t2i_model", "metadata")
    ):
        metadata = metadata if isinstance(metadata, dict) else {}
        problem = metadata_problem(metadata, keys)
        if problem:
            left_out.append(LeftOut(item_id, item_key, model, problem))
            continue
        by_model[model].append(
            gep.GepItem.from_metadata(
                item_id, _item_metadata(metadata), answers.get(item_id, {}), scores.get(item_id, {})
            )
        )
    return GepRows(items_by_model=dict(sorted(by_model.items())), versions=versions, left_out=tuple(left_out))


def label_counts(scope: Scope, *, keys: Sequence[str]) -> dict[str, dict[int, dict[str, int]]]:
    """Per question key: item id -> ``{answer: annotators}`` of the labelled items in scope (T2I
    model filter applied, category not): the agreement's count matrix."""
    scope = Scope(scope.study, t2i_model=scope.t2i_model)
    grouped: dict[str, dict[int, dict[str, int]]] = {key: {} for key in keys}
    for key, item_id, value, n in (
        Label.objects.filter(scope.q("item__"), question__key__in=list(keys))
        .values_list("question__key", "item_id", "value")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        grouped[key].setdefault(item_id, {})[value] = n
    return grouped


@dataclass
class AttributeItem:
    """One image of an attribute's drill-down: every annotator's answer to the question, its
    final answer (None: none yet) and each reported detector's score for the attribute (None:
    no ok prediction, or no score for this key)."""

    item: Item
    image: ItemImage | None
    gender: str
    setting: str
    labels: list[Label]
    final: str | None
    scores: list[tuple[str, float | None]]


@dataclass(frozen=True)
class AttributeItems:
    """A drill-down's images: ``rows``, those read (at most ``limit`` per group, see
    ``attribute_items``), and ``counts``, how many items each (T2I model, gender, final answer)
    group holds in all (final answer None: none yet)."""

    rows: list[AttributeItem]
    counts: dict[tuple[str, str, str | None], int]

    @property
    def n_items(self) -> int:
        return sum(self.counts.values())


class _NamesKey(Lookup):
    """A JSON array of strings (``Item.question_keys``) holds the string ``rhs``. JSONField's
    ``contains`` does not run on SQLite, and its ``has_key`` there reads object keys only."""

    lookup_name = "names_key"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        raise NotSupportedError("names_key: SQLite and PostgreSQL only")

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"EXISTS (SELECT 1 FROM json_each({lhs}) WHERE json_each.value = %s)", [*lhs_params, self.rhs]

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} @> jsonb_build_array(%s::text)", [*lhs_params, self.rhs]


def _drilldown_items(scope: Scope, *, question: Question, setting: str) -> QuerySet[Item]:
    """The items whose image counts for ``question`` in ``setting``, each annotated with its
    ``gender`` and its ``final`` answer to the question (None: none yet)."""
    key = question.key
    items = scope.items().filter(metadata__setting=setting, metadata__gender__in=list(gep_design.GENDERS))
    if setting == gep_design.EXPLICIT:
        items = items.filter(metadata__attribute=key)
    # An empty question_keys asks every question; a neutral item may name only some.
    asks = Q(question_keys=[]) | Q(question_keys=None) | Q(_NamesKey(F("question_keys"), key))
    return items.filter(asks).annotate(
        gender=KT("metadata__gender"),
        question_final=FilteredRelation("final_labels", condition=Q(final_labels__question=question)),
        final=F("question_final__value"),
    )


def _shown_ids(items: QuerySet[Item], limit: int | None) -> list[int]:
    """The ids of ``items`` to read, ordered by T2I model, index, id: with ``limit``, the first
    ``limit`` by index of each (T2I model, gender, final answer) group."""
    if limit is not None:
        items = items.annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("t2i_model"), F("gender"), F("final")],
                order_by=[F("index").asc(), F("id").asc()],
            )
        ).filter(rank__lte=limit)
    return list(items.order_by("t2i_model", "index", "id").values_list("id", flat=True))


def _attribute_item(item: Item, *, key: str, setting: str, versions: Mapping[str, str]) -> AttributeItem:
    links = {link.role: link for link in item.item_images.all()}
    predicted = links.get(ImageRole.IMAGE)
    # reported_predictions: a nested Prefetch's to_attr, which django-stubs does not follow.
    reported = predicted.image.reported_predictions if predicted else []  # type: ignore[attr-defined]
    by_detector = {p.detector: p for p in reported}
    scores = []
    for name in versions:
        prediction = by_detector.get(name)
        value = ((prediction.output or {}).get("scores") or {}).get(key) if prediction else None
        scores.append((name, value))
    return AttributeItem(
        item=item,
        image=item_main_image(item),
        gender=item.metadata.get("gender", ""),
        setting=setting,
        # question_labels, question_final: the Prefetches' to_attr (``item_answers_prefetches``).
        labels=list(item.question_labels),  # type: ignore[attr-defined]
        final=item.question_final[0].value if item.question_final else None,  # type: ignore[attr-defined]
        scores=scores,
    )


def attribute_items(
    scope: Scope,
    *,
    question: Question,
    setting: str,
    versions: Mapping[str, str],
    limit: int | None = None,
) -> AttributeItems:
    """The items of ``question`` in ``setting`` with labels, final answer and scores (with
    ``limit``: the first of each group), and every group's size."""
    items = _drilldown_items(scope, question=question, setting=setting)
    # gender, final: annotations of _drilldown_items, which django-stubs does not follow.
    grouped = items.values_list("t2i_model", "gender", "final")  # type: ignore[misc]
    counts = {
        (model, gender, final): n for model, gender, final, n in grouped.annotate(n=Count("id")).order_by()
    }
    ids = _shown_ids(items, limit)
    read: dict[int, Item] = {}
    for chunk in in_chunks(ids):
        chunk_items = Item.objects.filter(IsIn(F("id"), chunk))
        # The labels for ``question`` by annotator, its final label, and its images with the
        # reported detectors' ``ok`` predictions of kind ``attributes``.
        predictions = Prediction.objects.filter(
            of_versions(versions), kind__in=KINDS, status=PredictionStatus.OK
        )
        prefetches = item_answers_prefetches(
            question, predictions=predictions, label_order=("annotator__username",)
        )
        read.update((item.pk, item) for item in chunk_items.prefetch_related(*prefetches))
    rows = [
        _attribute_item(read[pk], key=question.key, setting=setting, versions=versions)
        for pk in ids
        if pk in read  # removed since its id was read
    ]
    rows.sort(
        key=lambda r: (r.item.t2i_model, gep_design.GENDERS.index(r.gender))
    )  # stable: index order kept
    return AttributeItems(rows=rows, counts=counts)
