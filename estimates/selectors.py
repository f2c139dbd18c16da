"""Reads of the sampling rounds and the estimate built on them: the sampling frame, which rounds
count (docs/explanation/estimator.md), kept estimates and jobs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import takewhile
from typing import Any

from django.db import connection

from annotate.models import FinalLabel, FinalLabelRevision, Label
from detectors.models import Prediction, PredictionStatus
from estimates.kept import KeptReport
from estimates.models import EstimateJob, KeptEstimate, RoundItem, SamplingRound
from reports.selectors import Scope, latest_detector_versions, row_summary
from studies.models import ImageRole, Item, ItemChange, ItemImage, Question, Study

#: An item's ``verdict`` when the protocol gives none (no prediction at this version, or a
#: protocol whose estimate reads the detector's output itself).
MISSING = "missing"
#: An item's ``human`` when the protocol says only that its final labels are there.
LABELLED = "labelled"
#: Pending images listed by name per round (the count is always complete).
PENDING_LISTED = 20


@dataclass(frozen=True, slots=True)
class FrameItem:
    """One item as the estimator sees it: the protocol's codes of the detector's output and of its labels."""

    item_id: int
    image: str
    t2i_model: str
    prompt_id: int | None
    prompt: str
    verdict: str
    human: str | None


@dataclass(frozen=True, slots=True)
class RoundState:
    """A round of the series: each frame item's π and the selected items still without a final label."""

    round: SamplingRound
    pi: dict[int, float]
    selected: frozenset[int]
    pending: tuple[int, ...]

    @property
    def complete(self) -> bool:
        return not self.pending


@dataclass(frozen=True)
class Frame:
    """The items of a series of rounds, by id, and its rounds; ``not_in_frame`` counts items left out."""

    study: Study
    detector: str
    version: str
    items: tuple[FrameItem, ...]
    rounds: tuple[RoundState, ...]
    not_in_frame: int = 0

    @property
    def usable(self) -> tuple[RoundState, ...]:
        """The leading complete rounds: the ones an estimate may use."""
        return tuple(takewhile(lambda state: state.complete, self.rounds))

    @property
    def pending(self) -> tuple[RoundState, ...]:
        return self.rounds[len(self.usable) :]


def _study_images(study: Study) -> Any:
    return ItemImage.objects.filter(item__study=study, role=ImageRole.IMAGE)


def items_fully_labelled(study: Study) -> frozenset[int]:
    """Items with a final label for every question they ask."""
    keys = list(Question.objects.filter(study=study).values_list("key", flat=True))
    answered: dict[int, set[str]] = defaultdict(set)
    for item_id, key in FinalLabel.objects.filter(item__study=study).values_list("item_id", "question__key"):
        answered[item_id].add(key)
    return frozenset(
        item_id
        for item_id, asked in Item.objects.filter(study=study).values_list("pk", "question_keys")
        if (need := set(asked or keys)) and need <= answered.get(item_id, set())
    )


def detector_version(study: Study, detector: str, kind: str) -> str | None:
    """The version of the detector's newest prediction of ``kind`` in the study; None without any."""
    return latest_detector_versions(Scope(study), kinds=[kind], detector=detector).get(detector)


def items_disputed(study: Study, item_ids: list[int] | tuple[int, ...]) -> set[int]:
    """Of ``item_ids``, the disputed ones (they wait for a researcher, not for labels)."""
    from annotate.models import ItemState
    from annotate.selectors import items_with_state
    from studies.batching import in_rows

    return set(in_rows(items_with_state(study=study).filter(state=ItemState.DISPUTED), "pk", item_ids, "pk"))


def pending_rounds(frame: Frame) -> tuple[dict[str, Any], ...]:
    """The JSON ``pending`` of an estimate: each round still waiting, why, and its first images."""
    if not frame.pending:
        return ()
    name_of = {i.item_id: i.image for i in frame.items}
    waiting = [i for s in frame.pending for i in s.pending]
    listed = waiting[: PENDING_LISTED * len(frame.pending)]
    keys = dict(Item.objects.filter(pk__in=listed).values_list("pk", "key"))
    disputed = items_disputed(frame.study, waiting)
    return tuple(
        {
            "round": s.round.number,
            "pending_images": len(s.pending),
            "waiting_for_labels": sum(1 for i in s.pending if i not in disputed),
            "waiting_for_dispute": sum(1 for i in s.pending if i in disputed),
            "images": [name_of.get(i) or keys.get(i) or str(i) for i in s.pending[:PENDING_LISTED]],
        }
        for s in frame.pending
    )


def sampling_frame(
    study: Study,
    detector: str,
    version: str,
    *,
    labelled: frozenset[int] = frozenset(),
    humans: Mapping[int, str] | None = None,
    verdicts: Mapping[int, str] | None = None,
) -> Frame:
    """The items and rounds of the series (study, detector, version), in a handful of queries."""
    rounds = list(
        SamplingRound.objects.filter(study=study, detector=detector, detector_version=version).order_by(
            "number"
        )
    )
    rows_by_round: dict[int, list[tuple[int, float, bool]]] = defaultdict(list)
    for round_id, item_id, pi_value, chosen in RoundItem.objects.filter(round__in=rounds).values_list(
        "round_id", "item_id", "pi", "selected"
    ):
        rows_by_round[round_id].append((item_id, pi_value, chosen))
    items_qs = Item.objects.filter(study=study)
    n_study = items_qs.count()
    if rounds:
        # A subquery, not the ids: SQLite refuses more than 32,766 values per statement.
        items_qs = items_qs.filter(pk__in=RoundItem.objects.filter(round=rounds[0]).values("item_id"))
    image_of: dict[int, str] = dict(_study_images(study).values_list("item_id", "source_path"))
    # One object per item, rows streamed, the model's and prompt's strings shared between items.
    names: dict[str, str] = {}
    prompts: dict[int | None, str] = {}
    items = []
    for item_id, model, prompt_id, text, word in (
        items_qs.order_by("pk")
        .values_list("pk", "t2i_model", "prompt_id", "prompt__text", "prompt__word")
        .iterator(chunk_size=10_000)
    ):
        prompt = prompts.get(prompt_id)
        if prompt is None:
            prompt = prompts[prompt_id] = text or word or ""
        items.append(
            FrameItem(
                item_id=item_id,
                image=image_of.get(item_id, ""),
                t2i_model=names.setdefault(model, model),
                prompt_id=prompt_id,
                prompt=prompt,
                verdict=verdicts.get(item_id, MISSING) if verdicts is not None else MISSING,
                human=(
                    humans.get(item_id) if humans is not None else (LABELLED if item_id in labelled else None)
                ),
            )
        )
    del image_of
    have_label = {item.item_id for item in items if item.human is not None}
    states = []
    for sampling_round in rounds:
        rows = rows_by_round[sampling_round.pk]
        selected = frozenset(item_id for item_id, _, chosen in rows if chosen)
        pi = {item_id: pi_value for item_id, pi_value, _ in rows}
        states.append(RoundState(sampling_round, pi, selected, tuple(sorted(selected - have_label))))
    return Frame(study, detector, version, tuple(items), tuple(states), n_study - len(items))


def rounds_of_study(study: Study) -> list[SamplingRound]:
    """Every round of the study, newest first, with who drew it."""
    return list(SamplingRound.objects.filter(study=study).select_related("created_by").order_by("-number"))


def export_rows(study: Study, *, labelled_items: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """One row per (round, item) of every round of the study, in ``export_sampling``'s columns."""
    labelled = set(labelled_items)
    image_of = dict(Item.objects.filter(study=study).values_list("pk", "key"))
    image_of |= dict(_study_images(study).values_list("item_id", "source_path"))
    return [
        {
            "image": image_of.get(item_id, ""),
            "round": number,
            "pi": pi_value,
            "selected": int(selected),
            "labelled": int(item_id in labelled),
        }
        for number, item_id, pi_value, selected in RoundItem.objects.filter(round__study=study)
        .order_by("round__number", "item_id")
        .values_list("round__number", "item_id", "pi", "selected")
    ]


def item_outputs(study: Study, detector: str, version: str, kind: str) -> list[tuple[int, Any]]:
    """(item id, output) of the detector's ok predictions of ``kind`` at ``version`` in the study."""
    item_of: dict[int, list[int]] = defaultdict(list)
    for image_id, item_id in _study_images(study).values_list("image_id", "item_id"):
        item_of[image_id].append(item_id)
    out: list[tuple[int, Any]] = []
    for image_id, output in (
        Prediction.objects.filter(
            kind=kind,
            detector=detector,
            version=version,
            status=PredictionStatus.OK,
            image_id__in=_study_images(study).values("image_id"),
        )
        .values_list("image_id", "output")
        .iterator(chunk_size=2000)
    ):
        out.extend((item_id, output) for item_id in item_of.get(image_id, ()))
    return out


def study_data_version(study: Study) -> tuple[Any, ...]:
    """The study's own data version: counts, highest ids and last changes of the rows an estimate reads."""
    q = connection.ops.quote_name
    items = f"SELECT id FROM {q(Item._meta.db_table)} WHERE study_id = %s"
    images = f"SELECT image_id FROM {q(ItemImage._meta.db_table)} WHERE item_id IN ({items})"
    return row_summary(
        (
            (Item, "study_id = %s", None),
            (Question, "study_id = %s", None),
            (ItemChange, "study_id = %s", None),
            (ItemImage, f"item_id IN ({items})", None),
            (FinalLabel, f"item_id IN ({items})", "decided_at"),
            (FinalLabelRevision, f"item_id IN ({items})", None),
            (Label, f"item_id IN ({items})", "updated_at"),
            (Prediction, f"image_id IN ({images})", None),
        ),
        study.pk,
    )


def estimate_options(*, n_boot: int, seed: int, history: bool) -> str:
    """The options of a computation as text (``KeptEstimate.options``, ``EstimateJob.options``)."""
    return f"bootstrap={n_boot} seed={seed} history={int(history)}"


def estimate_state(study: Study, *, protocol: str, n_boot: int, seed: int, history: bool) -> str:
    """What an estimate is computed from, as text: the study's data version, its rounds and the options."""
    rounds = tuple(SamplingRound.objects.filter(study=study).order_by("number").values_list("pk", flat=True))
    options = estimate_options(n_boot=n_boot, seed=seed, history=history)
    return repr((study_data_version(study), rounds, protocol, options))


@dataclass(frozen=True)
class Kept:
    """The estimate last computed for a study, detector and options (``KeptEstimate``), read back."""

    report: KeptReport
    state: str
    computed_at: datetime
    seconds: float | None


def estimate_kept(study: Study, detector: str, options: str | None) -> Kept | None:
    """The kept estimate of (study, detector, options; None: the latest), or None."""
    rows = KeptEstimate.objects.filter(study=study, detector=detector)
    if options is not None:
        rows = rows.filter(options=options)
    row = rows.order_by("-computed_at").values_list("report", "state", "computed_at", "seconds").first()
    if row is None:
        return None
    report = KeptReport.from_json(row[0])
    if report is None:
        return None
    return Kept(report=report, state=row[1], computed_at=row[2], seconds=row[3])


def estimate_job(job_id: int) -> EstimateJob | None:
    return EstimateJob.objects.select_related("study").filter(pk=job_id).first()
