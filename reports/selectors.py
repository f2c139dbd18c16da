"""Reads every analysis shares: scope, coverage, detector versions, filter choices and the data
fingerprint (docs/explanation/reports.md)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from django.db import connection
from django.db.models import Max, Prefetch, Q, QuerySet

from annotate.models import FinalLabel, FinalLabelRevision, Label
from detectors.models import Prediction
from studies.errors import StudyNotChosen
from studies.models import Item, ItemChange, ItemImage, Prompt, Question, Study
from studies.protocols import PROTOCOLS, protocol_spec
from studies.selectors import filter_problem, known_values, study_chosen

# From a Prediction to the item its image file belongs to.
PREDICTION_TO_ITEM = "image__item_images__item__"


@dataclass(frozen=True)
class LeftOut:
    """An item a report cannot compare, and why (e.g. no ``gender`` in its metadata)."""

    item_id: int
    key: str
    t2i_model: str
    reason: str


def left_out_coverage(compared: int, left_out: Sequence[LeftOut]) -> dict[str, Any]:
    """A report's ``coverage`` of its items: compared, left out, and how many for each reason."""
    return {
        "items": compared + len(left_out),
        "items_compared": compared,
        "items_left_out": len(left_out),
        "left_out_reasons": dict(Counter(row.reason for row in left_out).most_common()),
    }


class UnknownFilter(ValueError):
    """A report was asked for a study, T2I model, category or detector that has no data."""


@dataclass(frozen=True)
class Scope:
    """The items a report covers: one study's, optionally of one T2I model and one prompt category."""

    study: Study
    t2i_model: str | None = None
    category: str | None = None

    def q(self, path: str = "") -> Q:
        """The scope as a ``Q`` on a model that reaches Item by ``path``."""
        q = Q(**{f"{path}study": self.study})
        if self.t2i_model:
            q &= Q(**{f"{path}t2i_model": self.t2i_model})
        if self.category:
            q &= Q(**{f"{path}prompt__category": self.category})
        return q

    def items(self) -> QuerySet[Item]:
        return Item.objects.filter(self.q())

    def narrowed(self, **changes: str | None) -> Scope:
        """The same study with another T2I model / category (None: all)."""
        values = {"t2i_model": self.t2i_model, "category": self.category} | changes
        return Scope(self.study, **values)


def predictions_in_scope(
    scope: Scope,
    *,
    role: str | None = None,
    kinds: Sequence[str] | None = None,
    detector: str | None = None,
) -> QuerySet[Prediction]:
    """Predictions on the ``role`` images of the items in scope; one row per (prediction, item)."""
    roles = [role] if role else list(protocol_spec(scope.study.protocol).image_roles)
    predictions = Prediction.objects.filter(scope.q(PREDICTION_TO_ITEM), image__item_images__role__in=roles)
    if kinds is not None:
        predictions = predictions.filter(kind__in=kinds)
    if detector:
        predictions = predictions.filter(detector=detector)
    return predictions


def output_kinds(study: Study) -> tuple[str, ...]:
    """The detector output kinds the study's protocol reads."""
    spec = PROTOCOLS.get(study.protocol)
    return spec.output_kinds if spec is not None else ()


class Coverage(TypedDict):
    """Items in scope (``images``, the report contract's name) and how many have a final label."""

    images: int
    final_labels: int


def coverage(scope: Scope, *, final_labels: int) -> Coverage:
    """How many items are in scope (counted from the study's index)."""
    return Coverage(images=scope.items().count(), final_labels=final_labels)


def final_answers(scope: Scope, keys: Iterable[str] | None = None) -> dict[int, dict[str, str]]:
    """item id -> {question key: final answer} of the items in scope that have a final label (for
    one of ``keys`` if given). One query."""
    labels = FinalLabel.objects.filter(scope.q("item__"))
    if keys is not None:
        labels = labels.filter(question__key__in=list(keys))
    answers: dict[int, dict[str, str]] = defaultdict(dict)
    for item_id, key, value in labels.values_list("item_id", "question__key", "value").order_by():
        answers[item_id][key] = value
    return dict(answers)


def item_answers_prefetches(
    question: Question, *, predictions: QuerySet[Prediction], label_order: Sequence[str]
) -> list[Prefetch[Any]]:
    """``prefetch_related`` lookups of a drill-down: labels, final label, images and predictions."""
    return [
        Prefetch(
            "labels",
            queryset=Label.objects.filter(question=question)
            .select_related("annotator")
            .order_by(*label_order),
            to_attr="question_labels",
        ),
        Prefetch(
            "final_labels", queryset=FinalLabel.objects.filter(question=question), to_attr="question_final"
        ),
        Prefetch(
            "item_images",
            queryset=ItemImage.objects.select_related("image")
            .prefetch_related(
                Prefetch("image__predictions", queryset=predictions, to_attr="reported_predictions")
            )
            .order_by("role"),
        ),
    ]


def distinct_by_seeks(rows: QuerySet[Any], fields: tuple[str, str] | tuple[str]) -> list[tuple[Any, ...]]:
    """The distinct values of ``fields`` among ``rows``, one index seek each (a loose index scan)."""
    found: list[tuple[Any, ...]] = []
    while True:
        after = rows
        if found:
            last = found[-1]
            after = rows.filter(
                Q(**{f"{fields[0]}__gt": last[0]})
                if len(fields) == 1
                else Q(**{f"{fields[0]}__gt": last[0]})
                | Q(**{fields[0]: last[0], f"{fields[1]}__gt": last[1]})
            )
        row = after.order_by(*fields).values_list(*fields).first()
        if row is None:
            return found
        found.append(tuple(row))


#: Predictions of one run read by the first step of ``latest_detector_versions``'s walk back
#: from the newest, and by the largest (each step twice the one before).
RUN_WALK_PAGE = 2_000
RUN_WALK_PAGE_MAX = 256_000


def latest_detector_versions(
    scope: Scope, *, kinds: Sequence[str] | None = None, detector: str | None = None
) -> dict[str, str]:
    """detector key -> the version reported: that of its newest prediction in scope."""
    newest: dict[str, tuple[int, str]] = {}
    for name, version, last in detector_runs_in_scope(scope, kinds=kinds, detector=detector):
        if name not in newest or last > newest[name][0]:
            newest[name] = (last, version)
    return {name: newest[name][1] for name in sorted(newest)}


def of_versions(versions: Mapping[str, str]) -> Q:
    """Predictions of these detector -> version pairs (none for an empty mapping)."""
    which = Q(pk__in=[])
    for name, version in versions.items():
        which |= Q(detector=name, version=version)
    return which


def detector_runs_in_scope(
    scope: Scope, *, kinds: Sequence[str] | None = None, detector: str | None = None
) -> list[tuple[str, str, int]]:
    """(detector, version, highest prediction id in scope) of every run of ``kinds`` in scope."""
    every = Prediction.objects.filter(detector=detector) if detector else Prediction.objects.all()
    found: list[tuple[str, str, int]] = []
    for run_detector, version in distinct_by_seeks(every, ("detector", "version")):
        ids = Prediction.objects.filter(detector=run_detector, version=version)
        if kinds is not None:
            ids = ids.filter(kind__in=kinds)
        in_scope = predictions_in_scope(scope, kinds=kinds, detector=run_detector).filter(version=version)
        # A run only other studies used is asked once from the scope's items, not walked back (0.25 s a call).
        if not in_scope.exists():
            continue
        below: int | None = None
        size = RUN_WALK_PAGE
        while True:
            page_query = ids if below is None else ids.filter(pk__lt=below)
            # The page's lowest id: the range [bottom, below) holds ``size`` of the run's ids.
            edge = list(page_query.order_by("-pk").values_list("pk", flat=True)[size - 1 : size])
            bottom = edge[0] if edge else None
            window = in_scope if below is None else in_scope.filter(pk__lt=below)
            if bottom is not None:
                window = window.filter(pk__gte=bottom)
            last = window.aggregate(last=Max("pk"))["last"]
            if last is not None:
                found.append((run_detector, version, last))
                break
            if bottom is None:  # the run's oldest prediction passed: none is in scope
                break
            below = bottom
            # Another study's newer predictions of the same run: larger pages, fewer queries.
            size = min(size * 2, RUN_WALK_PAGE_MAX)
    return found


@dataclass(frozen=True)
class FilterOptions:
    """What the dashboard's filter form offers, read from the data."""

    studies: list[Study]
    t2i_models: list[str]
    categories: list[str]
    detectors: list[str]


def filter_options(*, study: Study | None) -> FilterOptions:
    """Every study, and the T2I models, prompt categories and detectors present in ``study``."""
    studies = list(Study.objects.order_by("name"))
    if study is None:
        return FilterOptions(studies, [], [], [])
    items = Item.objects.filter(study=study)
    runs = detector_runs_in_scope(Scope(study), kinds=output_kinds(study))
    return FilterOptions(
        studies=studies,
        t2i_models=[model for (model,) in distinct_by_seeks(items, ("t2i_model",))],
        categories=[
            category for (category,) in distinct_by_seeks(Prompt.objects.filter(study=study), ("category",))
        ],
        detectors=sorted({run_detector for run_detector, _, _ in runs}),
    )


def study_for_slug(slug: str | None) -> Study:
    """The study with this slug, or the only study; UnknownFilter naming the studies otherwise."""
    try:
        return study_chosen(slug)
    except StudyNotChosen as exc:
        raise UnknownFilter(str(exc)) from None


def check_filters(scope: Scope, *, detector: str | None = None) -> None:
    """UnknownFilter when a T2I model, category or detector matches nothing in the study."""
    problem = filter_problem(scope.study, t2i_model=scope.t2i_model, category=scope.category)
    if problem:
        raise UnknownFilter(problem[1])
    if detector:
        predictions = predictions_in_scope(Scope(scope.study), kinds=output_kinds(scope.study))
        if not predictions.filter(detector=detector).exists():
            known = known_values(predictions.order_by().values_list("detector", flat=True).distinct())
            raise UnknownFilter(f"No predictions of detector '{detector}' (detectors: {known}).")


def row_summary(sources: Iterable[tuple[Any, str | None, str | None]], param: Any = None) -> tuple[Any, ...]:
    """Row count, highest id and (``extra``) latest change of each (model, where, extra) source, in one
    query of scalar sub-selects; ``param`` fills each ``where``'s one placeholder."""
    q = connection.ops.quote_name
    parts: list[str] = []
    params: list[Any] = []
    for model, where, extra in sources:
        condition = f" WHERE {where}" if where else ""
        for column in ["COUNT(*)", "MAX(id)"] + ([f"MAX({q(extra)})"] if extra else []):
            parts.append(f"(SELECT {column} FROM {q(model._meta.db_table)}{condition})")
            if where:
                params.append(param)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params or None)
        row = cursor.fetchone()
    return tuple(str(v) if v is not None and not isinstance(v, int) else v for v in row)


def data_fingerprint() -> tuple[Any, ...]:
    """A cheap summary of every row a report reads, which any write through the services changes."""
    tables = (
        Study,
        Question,
        Prompt,
        Item,
        ItemChange,
        ItemImage,
        FinalLabel,
        FinalLabelRevision,
        Label,
        Prediction,
    )
    changed = {FinalLabel: "decided_at", Label: "updated_at"}
    return row_summary((model, None, changed.get(model)) for model in tables)
