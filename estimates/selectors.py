"""Reads of the sampling rounds and the estimate built on them (issue 13).

One function gathers what every user of the rounds needs (``sampling_frame``): per item of a
gender study its image name, T2I model, prompt, the detector's verdict at one version (the
``detectors`` predictions), its final human label (``annotate``), and per round of that version
each item's π and whether it was drawn. ``bias_estimate`` turns the frame into the plain arrays
of ``metrics.ppi.estimate_model_bias``, one T2I model at a time.

Which rounds count. A round counts once every image it selected has a final label of the gender
question; later rounds are then usable too. The first round with a selected image still
unlabelled stops the series there (a later round gave π = 0 to that round's draw, so it cannot
be used without it): that round and all after it are reported as *pending*, with the images
that wait.

The population. A series of rounds (one detector version) covers the items that existed when
its first round was drawn: π describes them and only them. Items added to the study later are
left out of the estimate and counted in a warning.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import Max
from django.db.models.fields.json import KT

from annotate.models import FinalLabel
from detectors.models import OutputKind, Prediction, PredictionStatus, Verdict
from estimates.models import RoundItem, SamplingRound
from metrics import gender as gm
from metrics import ppi
from studies.models import ImageRole, Item, ItemImage, Question, Study

GENDER_QUESTION = "gender"
#: The estimate's detector output codes: the verdict, with a failed or missing prediction as
#: its own code (it is (0, 0) like "filtered", but the detector's errors may differ).
OUTPUT_CODES = {"male": 0, "female": 1, "filtered": 2, "failed": 3, "missing": 3}
#: Bootstrap replicates of the earlier rounds' points of the width history (a plot needs less
#: precision than the reported interval; the last point is the reported estimate itself).
HISTORY_BOOT = 200
#: Pending images listed by name per round (the count is always complete).
PENDING_LISTED = 20


@dataclass(frozen=True)
class FrameItem:
    """One item as the estimator sees it. ``verdict`` is male, female, filtered, failed (a
    failed prediction) or missing (none at this version); ``human`` is male, female, rest (low
    quality, other) or None (no final label)."""

    item_id: int
    image: str
    t2i_model: str
    prompt_id: int | None
    prompt: str
    verdict: str
    human: str | None


@dataclass(frozen=True)
class RoundState:
    """A round of the series with each frame item's π (0 where the round has no row) and the
    selected items that have no final label yet."""

    round: SamplingRound
    pi: dict[int, float]
    selected: frozenset[int]
    pending: tuple[int, ...]

    @property
    def complete(self) -> bool:
        return not self.pending


@dataclass(frozen=True)
class Frame:
    """The items of a series of rounds (or of the study, before its first round), ordered by
    id, and the series' rounds in order. ``not_in_frame`` counts study items left out."""

    study: Study
    detector: str
    version: str
    items: tuple[FrameItem, ...]
    rounds: tuple[RoundState, ...]
    not_in_frame: int = 0

    @property
    def usable(self) -> tuple[RoundState, ...]:
        """The leading complete rounds: the ones an estimate may use."""
        out = []
        for state in self.rounds:
            if not state.complete:
                break
            out.append(state)
        return tuple(out)

    @property
    def pending(self) -> tuple[RoundState, ...]:
        return self.rounds[len(self.usable) :]


def gender_question(study: Study) -> Question | None:
    return Question.objects.filter(study=study, key=GENDER_QUESTION).first()


def _study_images(study: Study) -> Any:
    return ItemImage.objects.filter(item__study=study, role=ImageRole.IMAGE)


def _every_image(study: Study) -> Any:
    """Every image of the study's items, whatever its role (a pair's seed and edit too)."""
    return ItemImage.objects.filter(item__study=study)


def items_fully_labelled(study: Study) -> frozenset[int]:
    """Items with a final label for every question they ask (``question_keys``; [] = all of
    the study's): the "labelled" of a protocol whose estimate reads all its questions."""
    keys = list(Question.objects.filter(study=study).values_list("key", flat=True))
    answered: dict[int, set[str]] = defaultdict(set)
    for item_id, key in FinalLabel.objects.filter(item__study=study).values_list("item_id", "question__key"):
        answered[item_id].add(key)
    out = set()
    for item_id, asked in Item.objects.filter(study=study).values_list("pk", "question_keys"):
        need = set(asked or keys)
        if need and need <= answered.get(item_id, set()):
            out.add(item_id)
    return frozenset(out)


def detectors_with_predictions(study: Study, kind: str = OutputKind.GENDER) -> list[str]:
    """Detectors with predictions of ``kind`` on the study's images, sorted."""
    return sorted(
        set(
            Prediction.objects.filter(
                kind=kind, image_id__in=_every_image(study).values("image_id")
            ).values_list("detector", flat=True)
        )
    )


def detector_version(study: Study, detector: str, kind: str = OutputKind.GENDER) -> str | None:
    """The version of the detector's most recently written prediction of ``kind`` on the
    study's images (the version run last, as the reports choose it); None when it has none."""
    row = (
        Prediction.objects.filter(
            kind=kind,
            detector=detector,
            image_id__in=_every_image(study).values("image_id"),
        )
        .values("version")
        .annotate(last_id=Max("pk"))
        .order_by("-last_id")
        .first()
    )
    return row["version"] if row else None


def _human_class(value: str | None, clear: Sequence[str]) -> str | None:
    if value is None:
        return None
    index = gm.class_index(value, clear)
    return ppi.CLASSES[index]


def pending_rounds(frame: Frame) -> tuple[dict[str, Any], ...]:
    """The JSON ``pending`` of an estimate: each round still waiting for final labels, with the
    count and the first ``PENDING_LISTED`` of the images it waits for."""
    return tuple(
        {
            "round": s.round.number,
            "pending_images": len(s.pending),
            "images": list(s.pending[:PENDING_LISTED]),
        }
        for s in frame.pending
    )


def sampling_frame(
    study: Study, detector: str, version: str, *, labelled: frozenset[int] | None = None
) -> Frame:
    """The items and rounds of the series (study, detector, version). A handful of queries.

    ``labelled`` (a protocol other than gender, issue 21): the ids of the items whose final
    labels the protocol's estimate reads are all there; such an item's ``human`` is
    ``"labelled"`` and its ``verdict`` ``"missing"`` (the estimate reads the detector's
    output itself)."""
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
        # A subquery, not the ids: a round of a million items would pass a million values
        # (SQLite refuses more than 32,766 per statement).
        items_qs = items_qs.filter(pk__in=RoundItem.objects.filter(round=rounds[0]).values("item_id"))
    base = list(
        items_qs.order_by("pk").values_list("pk", "t2i_model", "prompt_id", "prompt__text", "prompt__word")
    )
    ids = [row[0] for row in base]
    image_of: dict[int, tuple[int, str]] = {}
    for item_id, image_id, source in _study_images(study).values_list("item_id", "image_id", "source_path"):
        image_of[item_id] = (image_id, source)
    verdict_of_image: dict[int, str] = {}
    gender_kind = labelled is None
    for image_id, status, label in (
        Prediction.objects.filter(
            kind=OutputKind.GENDER,
            detector=detector,
            version=version,
            image_id__in=_study_images(study).values("image_id"),
        )
        .annotate(label=KT("output__label"))
        .values_list("image_id", "status", "label")
        if gender_kind
        else []
    ):
        if status != PredictionStatus.OK:
            verdict_of_image[image_id] = "failed"
        elif label in (Verdict.MALE, Verdict.FEMALE):
            verdict_of_image[image_id] = str(label)
        else:
            verdict_of_image[image_id] = Verdict.FILTERED.value
    question = gender_question(study) if gender_kind else None
    clear = gm.check_clear_values(question.clear_values) if question else ("male", "female")
    finals: dict[int, str] = {}
    if question is not None:
        finals = dict(
            FinalLabel.objects.filter(item__study=study, question=question).values_list("item_id", "value")
        )
    items = []
    for item_id, model, prompt_id, text, word in base:
        image_id, source = image_of.get(item_id, (None, ""))
        verdict = verdict_of_image.get(image_id, "missing") if image_id is not None else "missing"
        items.append(
            FrameItem(
                item_id=item_id,
                image=source,
                t2i_model=model,
                prompt_id=prompt_id,
                prompt=text or word or "",
                verdict=verdict,
                human=(
                    _human_class(finals.get(item_id), clear)
                    if labelled is None
                    else ("labelled" if item_id in labelled else None)
                ),
            )
        )
    have_label = {item.item_id for item in items if item.human is not None}
    states = []
    for sampling_round in rounds:
        rows = rows_by_round[sampling_round.pk]
        selected = frozenset(item_id for item_id, _, chosen in rows if chosen)
        states.append(
            RoundState(
                round=sampling_round,
                pi={item_id: pi_value for item_id, pi_value, _ in rows},
                selected=selected,
                pending=tuple(sorted(selected - have_label)),
            )
        )
    return Frame(study, detector, version, tuple(items), tuple(states), n_study - len(ids))


# --- the estimate --------------------------------------------------------------------------------


def _vector(label: str | None) -> tuple[float, float]:
    if label == "male":
        return (1.0, 0.0)
    if label == "female":
        return (0.0, 1.0)
    return (0.0, 0.0)


@dataclass(frozen=True)
class Arrays:
    """One T2I model's items as ``metrics.ppi`` reads them: (K, n) for the rounds."""

    prompt_ids: np.ndarray
    f: np.ndarray
    y: np.ndarray
    xi: np.ndarray
    pi: np.ndarray
    outputs: np.ndarray


def arrays(items: Sequence[FrameItem], rounds: Sequence[RoundState]) -> Arrays:
    """The estimator's inputs for ``items`` under ``rounds``: ξ = selected and finally labelled
    (earlier rounds' selected items count in their first round only)."""
    n = len(items)
    f = np.array([_vector(i.verdict) for i in items], dtype=float).reshape(n, 2)
    y = np.array(
        [_vector(i.human) if i.human is not None else (np.nan, np.nan) for i in items], dtype=float
    ).reshape(n, 2)
    xi = np.zeros((len(rounds), n), dtype=bool)
    pi = np.zeros((len(rounds), n), dtype=float)
    taken: set[int] = set()
    for k, state in enumerate(rounds):
        for j, item in enumerate(items):
            pi[k, j] = state.pi.get(item.item_id, 0.0)
            if item.item_id in state.selected and item.human is not None and item.item_id not in taken:
                xi[k, j] = True
        taken |= state.selected
    prompt_ids = np.array([i.prompt_id if i.prompt_id is not None else -1 for i in items], dtype=np.int64)
    outputs = np.array([OUTPUT_CODES[i.verdict] for i in items], dtype=np.int64)
    return Arrays(prompt_ids, f, y, xi, pi, outputs)


@dataclass(frozen=True)
class RoundPoint:
    """The model score's interval after the first ``rounds`` rounds: ``labels`` labels spent."""

    rounds: int
    labels: int
    width: float | None
    width_human: float | None


@dataclass(frozen=True)
class ModelEstimate:
    """One T2I model: the estimate, its prompt names, and the interval width round by round."""

    t2i_model: str
    estimate: ppi.ModelBiasEstimate | None
    prompt_names: dict[int, str]
    n_images: int
    detector_only: float | None
    pending_images: int
    history: tuple[RoundPoint, ...] = ()
    warnings: tuple[str, ...] = ()
    #: (prompt name, images) of every prompt of the model.
    prompt_sizes: tuple[tuple[str, int], ...] = ()

    def as_json(self, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """The issue's JSON contract for this model, plus ``warnings`` and ``pending``."""
        if self.estimate is None:
            body: dict[str, Any] = {
                "model_bias_score": {"estimate": None, "ci95": None, "bias_corrected": None},
                "human_only": {"estimate": None, "ci95": None, "bias_corrected": None},
                "detector_only": self.detector_only,
                "lambda": None,
                "effective_labels": None,
                "n_images": self.n_images,
                "n_labelled": 0,
                "rounds": 0,
                "prompts": {
                    name: {"estimate": None, "ci95": None, "n_images": n, "n_labelled": 0}
                    for name, n in self.prompt_sizes
                },
                "labels_for_half_width": None,
                "warnings": list(self.warnings),
            }
        else:
            # The estimator ran on prompt names (see ``bias_estimate``): its keys are the names.
            body = self.estimate.as_json()
            body["warnings"] = list(self.warnings) + body["warnings"]
        body["pending"] = pending
        return body


@dataclass(frozen=True)
class StudyEstimate:
    """The estimate of every T2I model of a study for one detector version."""

    study: Study
    detector: str
    version: str
    models: tuple[ModelEstimate, ...]
    rounds_used: tuple[SamplingRound, ...]
    pending: tuple[RoundState, ...]
    frame: Frame

    def pending_json(self, t2i_model: str | None = None) -> list[dict[str, Any]]:
        """Pending rounds: number, how many selected images wait (of this model, if given) and
        the first few of their image names."""
        names = {i.item_id: i for i in self.frame.items}
        out = []
        for state in self.pending:
            waiting = [
                names[i].image
                for i in state.pending
                if i in names and (t2i_model is None or names[i].t2i_model == t2i_model)
            ]
            out.append(
                {
                    "round": state.round.number,
                    "pending_images": len(waiting),
                    "images": waiting[:PENDING_LISTED],
                }
            )
        return out

    def as_json(self) -> dict[str, Any]:
        """``{t2i_model: {...the contract...}}``."""
        return {m.t2i_model: m.as_json(self.pending_json(m.t2i_model)) for m in self.models}


def _prompt_names(items: Sequence[FrameItem]) -> dict[int, str]:
    """Prompt id -> the name the JSON uses: its text, with the id added when two prompts of a
    model share a text (a study may hold one text under two categories)."""
    by_id: dict[int, str] = {}
    for item in items:
        by_id.setdefault(item.prompt_id if item.prompt_id is not None else -1, item.prompt or "(no prompt)")
    counts: dict[str, int] = defaultdict(int)
    for text in by_id.values():
        counts[text] += 1
    return {pid: (text if counts[text] == 1 else f"{text} (#{pid})") for pid, text in by_id.items()}


def _detector_only(items: Sequence[FrameItem]) -> float | None:
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        key = item.prompt_id if item.prompt_id is not None else -1
        tally = counts[key]  # every prompt is listed, scored or not
        if item.verdict == "male":
            tally[0] += 1
        elif item.verdict == "female":
            tally[1] += 1
    return gm.model_bias_score({k: gm.prompt_bias_score(m, f) for k, (m, f) in counts.items()}).value


def _width(score: ppi.ScoreEstimate) -> float | None:
    return None if score.ci95 is None else float(score.ci95[1] - score.ci95[0])


def bias_estimate(
    study: Study,
    detector: str,
    *,
    version: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    history: bool = False,
) -> StudyEstimate:
    """The prediction-powered estimate per T2I model from the detector's predictions at
    ``version`` (default: the version run last) and the complete rounds of that version.

    ``history`` adds, per model, the interval widths after each complete round (one estimate
    per round, with at most ``HISTORY_BOOT`` replicates before the last: for the page's plot).
    Raises LookupError when the detector has no gender predictions in the study."""
    version = version or detector_version(study, detector)
    if version is None:
        raise LookupError(f"detector '{detector}' has no gender predictions in study '{study.slug}'")
    frame = sampling_frame(study, detector, version)
    usable = frame.usable
    by_model: dict[str, list[FrameItem]] = defaultdict(list)
    for item in frame.items:
        by_model[item.t2i_model].append(item)
    extra: list[str] = []
    if frame.not_in_frame:
        extra.append(
            f"{frame.not_in_frame} item(s) were added to the study after round {frame.rounds[0].round.number} "
            "and are not in this estimate (the rounds' π describe the items that existed then)."
        )
    older = (
        SamplingRound.objects.filter(study=study, detector=detector)
        .exclude(detector_version=version)
        .values_list("number", "detector_version")
    )
    if older:
        listed = ", ".join(f"{number} ({v})" for number, v in older)
        extra.append(
            f"Round(s) {listed} were drawn for another version of {detector} and are not combined with "
            f"version {version}; a round drawn for {version} takes the labels they gave with certainty."
        )
    pending_items = {i for state in frame.pending for i in state.pending}
    models = []
    for model in sorted(by_model):
        items = by_model[model]
        names = _prompt_names(items)
        sizes: dict[str, int] = defaultdict(int)
        for item in items:
            sizes[names[item.prompt_id if item.prompt_id is not None else -1]] += 1
        waiting = sum(1 for i in items if i.item_id in pending_items)
        detector_only = _detector_only(items)
        warnings = list(extra)
        if frame.pending:
            warnings.append(
                f"{waiting} image(s) of {model} drawn in round(s) "
                f"{', '.join(str(s.round.number) for s in frame.pending)} wait for a final label; those "
                "rounds are not used until all their images are labelled."
            )
        if not usable:
            warnings.append("No complete sampling round yet: only the detector's score is known.")
            models.append(
                ModelEstimate(
                    model,
                    None,
                    names,
                    len(items),
                    detector_only,
                    waiting,
                    (),
                    tuple(warnings),
                    tuple(sizes.items()),
                )
            )
            continue
        data = arrays(items, usable)
        # Prompts by name, so the estimator's keys and warnings speak the researcher's words.
        named = np.array([names[i.prompt_id if i.prompt_id is not None else -1] for i in items], dtype=object)
        result = ppi.estimate_model_bias(
            named,
            data.f,
            data.y,
            data.xi,
            data.pi,
            detector_outputs=data.outputs,
            n_boot=n_boot,
            seed=seed,
        )
        points = []
        if history:
            for k in range(1, len(usable) + 1):
                partial = result
                if k < len(usable):
                    part = arrays(items, usable[:k])
                    partial = ppi.estimate_model_bias(
                        named,
                        part.f,
                        part.y,
                        part.xi,
                        part.pi,
                        detector_outputs=part.outputs,
                        n_boot=min(n_boot, HISTORY_BOOT),
                        seed=seed,
                    )
                points.append(
                    RoundPoint(
                        k, partial.n_labelled, _width(partial.model_bias_score), _width(partial.human_only)
                    )
                )
        models.append(
            ModelEstimate(
                model,
                result,
                names,
                len(items),
                result.detector_only,
                waiting,
                tuple(points),
                tuple(warnings),
                tuple(sizes.items()),
            )
        )
    return StudyEstimate(
        study, detector, version, tuple(models), tuple(s.round for s in usable), frame.pending, frame
    )


def rounds_of_study(study: Study) -> list[SamplingRound]:
    """Every round of the study, newest first, with who drew it."""
    return list(SamplingRound.objects.filter(study=study).select_related("created_by").order_by("-number"))


def export_rows(study: Study, *, labelled_items: frozenset[int] | None = None) -> list[dict[str, Any]]:
    """One row per (round, item) of every round of the study: the ``export_sampling`` columns
    ``image``, ``round``, ``pi``, ``selected``, ``labelled`` (labelled: the item has a final
    label of the gender question now, or is among ``labelled_items`` -- what the protocol's
    estimate counts as labelled -- when given). ``image`` is the item's key for an item without
    an ``image`` (a pair). Ordered by round, then item."""
    labelled: set[int] = set()
    if labelled_items is not None:
        labelled = set(labelled_items)
    elif (question := gender_question(study)) is not None:
        labelled = set(
            FinalLabel.objects.filter(item__study=study, question=question).values_list("item_id", flat=True)
        )
    image_of = dict(Item.objects.filter(study=study).values_list("pk", "key"))
    image_of |= dict(_study_images(study).values_list("item_id", "source_path"))
    rows = []
    for number, item_id, pi_value, selected in (
        RoundItem.objects.filter(round__study=study)
        .order_by("round__number", "item_id")
        .values_list("round__number", "item_id", "pi", "selected")
    ):
        rows.append(
            {
                "image": image_of.get(item_id, ""),
                "round": number,
                "pi": pi_value,
                "selected": int(selected),
                "labelled": int(item_id in labelled),
            }
        )
    return rows


def item_outputs(study: Study, detector: str, version: str, kind: str) -> list[tuple[int, Any]]:
    """(item id, output) of the detector's ok predictions of ``kind`` at ``version`` on the
    study's item images: what a protocol's stratified design reads its detector output codes
    from (issue 21). Two queries, the predictions streamed."""
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
