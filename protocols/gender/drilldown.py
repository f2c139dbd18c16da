"""Reads behind the gender drill-downs: a prompt's items, a detector's confusion and disagreements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, F, Q, QuerySet

from annotate.models import FinalLabel, Label
from detectors.kinds import FILTER_REASON_LABELS
from detectors.models import Prediction, PredictionStatus
from metrics.gender import FIRST, SECOND
from protocols.gender.selectors import CLEAR_VERDICTS, FILTERED, KINDS, with_final
from protocols.gender.tables import confusion_table, with_seen
from reports.selectors import (
    PREDICTION_TO_ITEM,
    Scope,
    item_answers_prefetches,
    latest_detector_versions,
    of_versions,
    predictions_in_scope,
)
from reports.tables import Table
from studies.batching import prefetch_in_chunks
from studies.models import ImageRole, Item, ItemImage, Prompt, Question
from studies.selectors import item_main_image

VERDICTS = (*CLEAR_VERDICTS, FILTERED)

# Gallery kinds of a detector's disagreements with the human final label.
DISAGREEMENTS = {
    "all": "All disagreements",
    "false_keep": "False keeps (low quality to humans, gendered by the detector)",
    "false_filter": "False filters (clear to humans, filtered by the detector)",
    "wrong_gender": "Wrong gender (kept, but the other gender)",
}


class UnknownDisagreement(ValueError):
    """A gallery kind that is not one of ``DISAGREEMENTS``."""


def reason_name(prediction: Prediction | None) -> str:
    """The display name of why a detector filtered an image ("No face"), "" when it did not."""
    reason = prediction.filter_reason if prediction is not None else ""
    return FILTER_REASON_LABELS.get(reason, reason) if reason else ""


def disagrees(human: str | None, verdict: str | None, *, clear: Sequence[str]) -> bool:
    """A kept item of the wrong gender, a filtered clear item, or a kept unclear item."""
    if human is None or not verdict:
        return False
    if human in clear:
        return verdict not in CLEAR_VERDICTS or clear.index(human) != CLEAR_VERDICTS.index(verdict)
    return verdict in CLEAR_VERDICTS


@dataclass
class ItemRow:
    """One item of a prompt with everything said about it, for side-by-side display."""

    item: Item
    image: ItemImage | None
    labels: list[Label]
    final: FinalLabel | None
    clear: tuple[str, str]
    verdicts: dict[str, Prediction | None] = field(default_factory=dict)

    @property
    def verdict_cells(self) -> list[tuple[str, Prediction | None, bool, str]]:
        """(detector, prediction, disagrees with the final label, filter reason's name)."""
        human = self.final.value if self.final else None
        return [
            (
                key,
                p,
                p is not None
                and p.status == PredictionStatus.OK
                and disagrees(human, p.verdict, clear=self.clear),
                reason_name(p),
            )
            for key, p in self.verdicts.items()
        ]


def prompt_items(
    *,
    prompt: Prompt,
    question: Question,
    clear: tuple[str, str],
    t2i_model: str | None = None,
    detectors: Sequence[str] | None = None,
) -> tuple[list[ItemRow], list[str]]:
    """(the prompt's items with every label, final label and prediction, the detector keys shown)."""
    scope = Scope(prompt.study, t2i_model=t2i_model)
    versions = latest_detector_versions(scope, kinds=KINDS)
    if detectors is not None:
        versions = {k: v for k, v in versions.items() if k in detectors}
    items = Item.objects.filter(prompt=prompt).order_by("t2i_model", "index", "id")
    if t2i_model:
        items = items.filter(t2i_model=t2i_model)
    read = list(items)
    # A chunk of items at a time: a prompt may have been drawn tens of thousands of times.
    predictions = Prediction.objects.filter(of_versions(versions), kind__in=KINDS)
    prefetch_in_chunks(
        read, *item_answers_prefetches(question, predictions=predictions, label_order=("created_at", "id"))
    )
    rows = []
    for item in read:
        links = {link.role: link for link in item.item_images.all()}
        predicted = links.get(ImageRole.IMAGE)
        # reported_predictions: a nested Prefetch's to_attr, which django-stubs does not follow.
        reported = predicted.image.reported_predictions if predicted else []  # type: ignore[attr-defined]
        by_detector = {p.detector: p for p in reported}
        rows.append(
            ItemRow(
                item=item,
                image=item_main_image(item),
                labels=list(item.question_labels),
                final=item.question_final[0] if item.question_final else None,
                clear=clear,
                verdicts={key: by_detector.get(key) for key in versions},
            )
        )
    return rows, list(versions)


def _reported(scope: Scope, detector: str) -> tuple[str | None, QuerySet[Prediction]]:
    """The detector's reported version (over every category) and its predictions of it in scope."""
    version = latest_detector_versions(scope.narrowed(category=None), kinds=KINDS, detector=detector).get(
        detector
    )
    return version, predictions_in_scope(scope, kinds=KINDS, detector=detector).filter(version=version)


def _judged(predictions: QuerySet[Prediction], question: Question) -> QuerySet[Prediction]:
    """The ok ones of ``predictions`` on items with a final label (``with_final``)."""
    return with_final(predictions, question=question).filter(
        status=PredictionStatus.OK, final_value__isnull=False
    )


@dataclass(frozen=True)
class DetectorConfusion:
    """Human final label x detector verdict, and the filtering / gender tables derived from it."""

    detector: str
    version: str | None
    counts: dict[tuple[str, str], int]  # (human final label, verdict) -> items
    labels: tuple[tuple[str, str], ...]  # (value, name) of the question's answers, then others
    clear: tuple[str, str]
    n_failed: int

    def _sum(self, humans: Sequence[str] | None, verdicts: Sequence[str]) -> int:
        return sum(
            n
            for (h, v), n in self.counts.items()
            if v in verdicts and (h in humans if humans is not None else h not in self.clear)
        )

    @property
    def filtering(self) -> dict[str, int]:
        """Clear = positive; kept = male or female verdict: tp, fn, fp, tn."""
        return {
            "tp": self._sum(self.clear, CLEAR_VERDICTS),
            "fn": self._sum(self.clear, (FILTERED,)),
            "fp": self._sum(None, CLEAR_VERDICTS),
            "tn": self._sum(None, (FILTERED,)),
        }

    @property
    def gender(self) -> dict[str, int]:
        """On items clear to humans and kept: "<human value>_<verdict>" -> items."""
        return {f"{h}_{v}": n for h, row in self.gender_matrix for v, n in row}

    @property
    def gender_matrix(self) -> list[tuple[str, list[tuple[str, int]]]]:
        """The same counts as rows: (human clear value, [(clear verdict, items), ...])."""
        return [(h, [(v, self.counts.get((h, v), 0)) for v in CLEAR_VERDICTS]) for h in self.clear]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def table(self) -> Table:
        return confusion_table(self.detector, self.counts, labels=self.labels, verdicts=VERDICTS)


def detector_confusion(
    scope: Scope,
    *,
    detector: str,
    question: Question,
    labels: Sequence[tuple[str, str]],
    clear: tuple[str, str],
) -> DetectorConfusion:
    """Counts of (final label, verdict) for one detector on the items in scope, in SQL."""
    version, predictions = _reported(scope, detector)
    rows = (
        _judged(predictions, question)
        .values(human=F("final_value"), verdict=F("output_label"))
        .annotate(n=Count("pk"))
        .order_by()
    )
    counts = {(r["human"], r["verdict"]): r["n"] for r in rows}
    return DetectorConfusion(
        detector=detector,
        version=version,
        counts=counts,
        labels=with_seen(labels, (h for h, _ in counts)),
        clear=clear,
        n_failed=predictions.filter(status=PredictionStatus.FAILED).count(),
    )


def _disagreement_filter(kind: str, clear: Sequence[str]) -> Q:
    first, second = clear
    false_keep = ~Q(final_value__in=list(clear)) & Q(output__label__in=CLEAR_VERDICTS)
    false_filter = Q(final_value__in=list(clear), output__label=FILTERED)
    wrong_gender = Q(final_value=first, output__label=CLEAR_VERDICTS[SECOND]) | Q(
        final_value=second, output__label=CLEAR_VERDICTS[FIRST]
    )
    kinds = {
        "false_keep": false_keep,
        "false_filter": false_filter,
        "wrong_gender": wrong_gender,
        "all": false_keep | false_filter | wrong_gender,
    }
    if kind not in kinds:
        raise UnknownDisagreement(f"Unknown kind {kind!r}: use one of {', '.join(DISAGREEMENTS)}.")
    return kinds[kind]


def detector_disagreements(
    scope: Scope, *, detector: str, question: Question, clear: tuple[str, str], kind: str = "all"
) -> QuerySet[Prediction]:
    """The detector's predictions that disagree with the final label, with the item's fields."""
    item = PREDICTION_TO_ITEM
    return (
        _judged(_reported(scope, detector)[1], question)
        .filter(_disagreement_filter(kind, clear))
        .annotate(
            item_id=F(f"{item}id"),
            t2i_model=F(f"{item}t2i_model"),
            prompt_id=F(f"{item}prompt_id"),
            word=F(f"{item}prompt__word"),
            human=F("final_value"),
        )
        .select_related("image")
        .order_by("item_id", "pk")
    )


def disagreement_counts(
    scope: Scope, *, detector: str, question: Question, clear: tuple[str, str]
) -> dict[str, int]:
    """How many items each gallery kind holds (one aggregate query)."""
    return _judged(_reported(scope, detector)[1], question).aggregate(
        **{kind: Count("pk", filter=_disagreement_filter(kind, clear)) for kind in DISAGREEMENTS}
    )
