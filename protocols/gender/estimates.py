"""The gender protocol's few-label estimate of the model bias score per T2I model: its sampling
frame, its estimate by ``metrics.ppi`` and its report."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
from django.db.models import QuerySet
from django.db.models.fields.json import KT

from annotate.models import FinalLabel
from detectors.judges import CANT_TELL
from detectors.kinds import KIND_GENDER
from detectors.models import Prediction, PredictionStatus, Verdict
from estimates.charts import Series, data_uri, series_width_chart_svg
from estimates.estimands import EstimandProtocol
from estimates.models import Design, SamplingRound
from estimates.report import pending_message
from estimates.selectors import (
    PENDING_LISTED,
    Frame,
    FrameItem,
    RoundState,
    detector_version,
    items_disputed,
    sampling_frame,
)
from metrics import gender as gm
from metrics import ppi, ppi_design, ppi_shares, stratified
from protocols.gender.selectors import GENDER_QUESTION
from reports import render
from reports.tables import Table, ci_field, num_field, raw_cell, text_field, value_field
from studies.models import ImageRole, ItemImage, Question, Study

#: The estimate's detector output codes: the verdict, with a failed or missing prediction as
#: its own code (it is (0, 0) like "filtered", but the detector's errors may differ).
OUTPUT_CODES = {"male": 0, "female": 1, "filtered": 2, "failed": 3, "missing": 3}
#: Bootstrap replicates of the earlier rounds' points of the width history (a plot needs less
#: precision than the reported interval; the last point is the reported estimate itself).
HISTORY_BOOT = 200
V = TypeVar("V")


def gender_question(study: Study) -> Question | None:
    return Question.objects.filter(study=study, key=GENDER_QUESTION).first()


FAILED = "failed"
_CLEAR = {Verdict.MALE.value: Verdict.MALE.value, Verdict.FEMALE.value: Verdict.FEMALE.value}


def _predictions(
    study: Study, detector: str, version: str
) -> tuple[QuerySet[ItemImage], QuerySet[Prediction]]:
    """The study's item images and the detector's gender predictions on them at ``version``."""
    images = ItemImage.objects.filter(item__study=study, role=ImageRole.IMAGE)
    predictions = Prediction.objects.filter(
        kind=KIND_GENDER, detector=detector, version=version, image_id__in=images.values("image_id")
    )
    return images, predictions


def verdicts(study: Study, detector: str, version: str) -> dict[int, str]:
    """Item id -> the detector's verdict at ``version``: male, female, filtered or failed."""
    images, predictions = _predictions(study, detector, version)
    verdict_of_image: dict[int, str] = {}
    for image_id, status, label in predictions.annotate(label=KT("output__label")).values_list(
        "image_id", "status", "label"
    ):
        # The module's own strings, not one per row: a million items share four.
        ok = status == PredictionStatus.OK
        verdict_of_image[image_id] = _CLEAR.get(label, Verdict.FILTERED.value) if ok else FAILED
    return _per_item(images, verdict_of_image)


def judge_vectors(study: Study, detector: str, version: str) -> dict[int, tuple[float, float]]:
    """Item id -> (p_male, p_female) of a judge's ok output at ``version`` that scores ``cant_tell``."""
    images, predictions = _predictions(study, detector, version)
    by_image: dict[int, tuple[float, float]] = {}
    for image_id, scores in (
        predictions.filter(status=PredictionStatus.OK, output__scores__has_key=CANT_TELL)
        .values_list("image_id", "output__scores")
        .iterator(chunk_size=2000)
    ):
        male, female = scores.get(Verdict.MALE), scores.get(Verdict.FEMALE)
        if isinstance(male, int | float) and isinstance(female, int | float):
            by_image[image_id] = (float(male), float(female))
    return _per_item(images, by_image)


def _per_item(images: QuerySet[ItemImage], by_image: Mapping[int, V]) -> dict[int, V]:
    """Item id -> the value of its image; the item's last image counts, as the frame reads it."""
    out: dict[int, V] = {}
    for item_id, image_id in images.values_list("item_id", "image_id"):
        if image_id in by_image:
            out[item_id] = by_image[image_id]
        else:
            out.pop(item_id, None)
    return out


def humans(study: Study) -> dict[int, str]:
    """Item id -> the class of its final gender label: male, female (the clear values) or rest."""
    question = gender_question(study)
    if question is None:
        return {}
    clear = gm.check_clear_values(question.clear_values)
    finals = FinalLabel.objects.filter(item__study=study, question=question).values_list("item_id", "value")
    return {item_id: ppi_shares.CLASSES[gm.class_index(value, clear)] for item_id, value in finals}


def labelled(study: Study) -> frozenset[int]:
    """The items with a final label of the gender question (``export_sampling``'s labelled)."""
    question = gender_question(study)
    if question is None:
        return frozenset()
    return frozenset(
        FinalLabel.objects.filter(item__study=study, question=question).values_list("item_id", flat=True)
    )


def gender_frame(study: Study, detector: str, version: str) -> Frame:
    """The core's frame with the gender verdicts and human classes."""
    return sampling_frame(
        study, detector, version, humans=humans(study), verdicts=verdicts(study, detector, version)
    )


def _detector_vectors(items: Sequence[FrameItem], soft: Mapping[int, tuple[float, float]]) -> np.ndarray:
    """(n, 2): per item a judge's (p_male, p_female) where ``soft`` has it, else its verdict's."""
    return np.array([soft.get(i.item_id) or _vector(i.verdict) for i in items], dtype=float).reshape(
        len(items), 2
    )


def _vector(label: str | None) -> tuple[float, float]:
    return {"male": (1.0, 0.0), "female": (0.0, 1.0)}.get(label or "", (0.0, 0.0))


def arrays(
    items: Sequence[FrameItem],
    rounds: Sequence[RoundState],
    soft: Mapping[int, tuple[float, float]] | None = None,
) -> ppi_shares.LabelledSample:
    """The estimator's inputs for ``items`` under ``rounds``; ``soft``: a judge's (p_male, p_female)
    per item, in place of its verdict's vector (docs/explanation/estimator.md)."""
    n = len(items)
    f = _detector_vectors(items, soft or {})
    y = np.array(
        [_vector(i.human) if i.human is not None else (np.nan, np.nan) for i in items], dtype=float
    ).reshape(n, 2)
    pi = np.array([[state.pi.get(i.item_id, 0.0) for i in items] for state in rounds], dtype=float)
    pi = pi.reshape(len(rounds), n)
    # An item counts in the first round that drew it, once it has its final label.
    xi = np.zeros((len(rounds), n), dtype=bool)
    taken: set[int] = set()
    for k, state in enumerate(rounds):
        xi[k] = [
            i.item_id in state.selected and i.human is not None and i.item_id not in taken for i in items
        ]
        taken |= state.selected
    prompt_ids = np.array([_prompt_id(i) for i in items], dtype=np.int64)
    outputs = np.array([OUTPUT_CODES[i.verdict] for i in items], dtype=np.int64)
    return ppi_shares.LabelledSample(prompt_ids, f, y, xi, pi, outputs)


@dataclass(frozen=True)
class RoundPoint:
    """The model score's interval after the first ``rounds`` rounds: ``labels`` labels spent."""

    rounds: int
    labels: int
    width: float | None
    width_human: float | None


@dataclass(frozen=True)
class ModelEstimate:
    """One T2I model: the estimate and the interval width round by round."""

    t2i_model: str
    estimate: ppi.ModelBiasEstimate | None
    n_images: int
    detector_only: float | None
    history: tuple[RoundPoint, ...] = ()
    warnings: tuple[str, ...] = ()
    #: (prompt name, images) of every prompt of the model.
    prompt_sizes: tuple[tuple[str, int], ...] = ()

    def as_json(self, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """The estimate's JSON contract for this model, plus ``warnings`` and ``pending``."""
        estimate = self.estimate
        if estimate is None:  # the contract with every figure null
            none = ppi.ScoreEstimate(None, None, None, None, 0, ())
            prompts = {k: ppi.PromptEstimate(None, None, None, n, 0, None) for k, n in self.prompt_sizes}
            estimate = ppi.ModelBiasEstimate(
                none, none, self.detector_only, prompts, self.n_images, 0, 0, (), None, ()
            )
        # The estimator ran on prompt names (see ``bias_estimate``): its keys are the names.
        body = estimate.as_json()
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
    #: item id -> (image name, T2I model) of the images pending rounds wait for: all the estimate
    #: keeps of the frame (the page caches it; the frame has an object per item of the study).
    waiting: dict[int, tuple[str, str]]

    def pending_json(self, t2i_model: str | None = None) -> list[dict[str, Any]]:
        """Pending rounds: number, images waiting (of this model, if given) and the first few names."""
        names = self.waiting
        out = []
        disputed = items_disputed(self.study, [i for s in self.pending for i in s.pending])
        for state in self.pending:
            ids = [i for i in state.pending if i in names and (t2i_model is None or names[i][1] == t2i_model)]
            waiting = [names[i][0] for i in ids]
            n_disputed = sum(1 for i in ids if i in disputed)
            out.append(
                {
                    "round": state.round.number,
                    "pending_images": len(waiting),
                    "waiting_for_labels": len(waiting) - n_disputed,
                    "waiting_for_dispute": n_disputed,
                    "images": waiting[:PENDING_LISTED],
                }
            )
        return out

    def as_json(self) -> dict[str, Any]:
        """``{t2i_model: {...the contract...}}``."""
        return {m.t2i_model: m.as_json(self.pending_json(m.t2i_model)) for m in self.models}

    def api_json(self) -> dict[str, Any]:
        """The API's body: the contract per model under ``models``."""
        return {"detector": self.detector, "version": self.version, "models": self.as_json()}

    def markdown(self) -> str:
        return render.render(summary_table(self), "md")

    def csv(self) -> str:
        return render.render(summary_table(self), "csv")

    def pending_messages(self) -> list[str]:
        return [pending_message(p, "image(s)") for p in self.pending_json()]

    def page_context(self) -> dict[str, Any]:
        svg = series_width_chart_svg(
            [
                Series(m.t2i_model, tuple((p.labels, p.width, p.width_human) for p in m.history))
                for m in self.models
                if m.history
            ]
        )
        return {
            "estimate": self,
            "table": summary_table(self),
            "chart_src": data_uri(svg) if svg else None,
            "pending": self.pending_json(),
            "prompt_tables": _prompt_tables(self),
            "warnings": sorted({w for m in self.models for w in m.warnings}),
        }


def _prompt_id(item: FrameItem) -> int:
    return item.prompt_id if item.prompt_id is not None else -1


def _prompt_names(items: Sequence[FrameItem]) -> dict[int, str]:
    """Prompt id -> its text in the JSON, with the id added when two prompts share a text."""
    by_id: dict[int, str] = {}
    for item in items:
        by_id.setdefault(_prompt_id(item), item.prompt or "(no prompt)")
    counts = Counter(by_id.values())
    return {pid: (text if counts[text] == 1 else f"{text} (#{pid})") for pid, text in by_id.items()}


def _detector_only(items: Sequence[FrameItem], soft: Mapping[int, tuple[float, float]]) -> float | None:
    counts: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for item, (male, female) in zip(items, _detector_vectors(items, soft), strict=True):
        tally = counts[_prompt_id(item)]  # every prompt is listed, scored or not
        tally[0] += male
        tally[1] += female
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
    """The prediction-powered estimate per T2I model at ``version`` (default: the last run);
    ``history``: the page's width-against-labels chart (an estimate per round)."""
    version = version or detector_version(study, detector, KIND_GENDER)
    if version is None:
        raise LookupError(f"detector '{detector}' has no gender predictions in study '{study.slug}'")
    frame = gender_frame(study, detector, version)
    soft = judge_vectors(study, detector, version)
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
        sizes = Counter(names[_prompt_id(item)] for item in items)
        waiting = sum(1 for i in items if i.item_id in pending_items)
        detector_only = _detector_only(items, soft)
        warnings = list(extra)
        if frame.pending:
            warnings.append(
                f"{waiting} image(s) of {model} drawn in round(s) "
                f"{', '.join(str(s.round.number) for s in frame.pending)} wait for a final label; those "
                "rounds are not used until all their images are labelled."
            )
        result: ppi.ModelBiasEstimate | None = None
        points: list[RoundPoint] = []
        if not usable:
            warnings.append(
                "No complete sampling round yet: only the detector's score is known"
                + (
                    " until the drawn round's images have final labels."
                    if frame.pending
                    else " (draw one: sample_for_labeling)."
                )
            )
        else:
            data = arrays(items, usable, soft)
            # Prompts by name, so the estimator's keys and warnings speak the researcher's words.
            named = np.array([names[_prompt_id(i)] for i in items], dtype=object)
            result = ppi.estimate_model_bias(replace(data, prompt_ids=named), n_boot=n_boot, seed=seed)
            detector_only = result.detector_only
            for k in range(1, len(usable) + 1) if history else ():
                partial = result
                if k < len(usable):
                    part = replace(arrays(items, usable[:k], soft), prompt_ids=named)
                    partial = ppi.estimate_model_bias(part, n_boot=min(n_boot, HISTORY_BOOT), seed=seed)
                widths = _width(partial.model_bias_score), _width(partial.human_only)
                points.append(RoundPoint(k, partial.n_labelled, *widths))
        models.append(
            ModelEstimate(
                model,
                result,
                len(items),
                detector_only,
                tuple(points),
                tuple(warnings),
                tuple(sizes.items()),
            )
        )
    waiting_names = {i.item_id: (i.image, i.t2i_model) for i in frame.items if i.item_id in pending_items}
    # The pending rounds without their π and selection per item (the estimate reads neither).
    pending = tuple(replace(state, pi={}, selected=frozenset()) for state in frame.pending)
    return StudyEstimate(
        study, detector, version, tuple(models), tuple(s.round for s in usable), pending, waiting_names
    )


def design_pi(frame: Frame, design: str, budget: int, pool: np.ndarray) -> np.ndarray:
    """π of the unlabelled ``pool`` under the active or stratified design."""
    items = frame.items
    soft = judge_vectors(frame.study, frame.detector, frame.version)
    if design == Design.ACTIVE:
        data = arrays(items, frame.rounds, soft)
        # Prompts are counted per T2I model: the estimate is.
        prompt_keys = np.array([f"{i.t2i_model}\x1f{i.prompt_id}" for i in items])
        model = ppi_shares.fit_covariance_model(replace(data, prompt_ids=prompt_keys))
        return ppi_design.inclusion_probabilities_active(
            np.asarray(data.detector_outputs), prompt_keys, model, budget, eligible=pool
        )
    if design == Design.STRATIFIED:
        # Strata: T2I model x prompt x verdict; each verdict's error spread from earlier rounds' labels.
        strata: list[Hashable] = [(i.t2i_model, i.prompt_id, i.verdict) for i in items]
        spread: dict[Hashable, float] | None = None
        if frame.rounds:
            data = arrays(items, frame.rounds, soft)
            xi, pi, f, y = (np.asarray(a) for a in (data.xi, data.pi, data.f, data.y))
            outputs, residual_sq, weights = [], [], []
            for k in range(xi.shape[0]):
                for j in np.flatnonzero(xi[k]):
                    outputs.append(items[j].verdict)
                    residual_sq.append(float(np.sum((y[j] - f[j]) ** 2)))
                    weights.append(1.0 / float(pi[k, j]))
            by_verdict = stratified.residual_spread(outputs, residual_sq, weights)
            spread = {key: by_verdict.get(key[2], 1.0) for key in strata}  # type: ignore[index]
        return stratified.inclusion_probabilities_stratified(strata, budget, spread=spread, eligible=pool)
    raise ValueError(f"the gender estimate computes no π of design {design!r}")


FIELDS = (
    text_field("t2i_model", "T2I model"),
    # The bias-corrected estimate: the point that lies inside the interval beside it.
    num_field("estimate", "Estimate", ("model_bias_score", "bias_corrected")),
    ci_field("ci95", "95 % interval", ("model_bias_score", "ci95"), 3),
    # The plug-in (eq. 1 on the estimated shares): biased upward when labels are few.
    num_field("plug_in", "Plug-in", ("model_bias_score", "estimate")),
    num_field("human_only", "Labels only", ("human_only", "bias_corrected")),
    ci_field("human_only_ci95", "Labels-only 95 % interval", ("human_only", "ci95"), 3),
    num_field("detector_only", "Detector only"),
    num_field("lambda", "λ", digits=2),
    num_field("effective_labels", "Effective labels", digits=0),
    *(
        value_field(key, label, raw_cell)
        for key, label in (
            ("n_labelled", "Labelled"),
            ("n_images", "Images"),
            ("rounds", "Rounds"),
            ("labels_for_half_width", "Labels to halve"),
        )
    ),
)


def summary_table(estimate: StudyEstimate) -> Table:
    """The estimate as one table (a row per T2I model), for ``estimate_bias --format md|csv`` and the page."""
    return Table.of(
        "bias_estimate",
        f"Model bias score estimated from {estimate.detector}@{estimate.version} and sampled labels",
        "Estimate: the detector on every image, corrected by the sampled human labels, with the "
        "detector weighted by λ (0: labels alone, 1: the detector's full weight; chosen from the data "
        "to make the interval narrow), bias-corrected by the design bootstrap so that it lies in its 95 % "
        "interval. Plug-in: the same score without that correction (too high when labels are few). "
        "Labels only: the sampled labels alone. Effective labels: how many labels alone would give "
        "the same precision.",
        FIELDS,
        (model.as_json([]) | {"t2i_model": model.t2i_model} for model in estimate.models),
    )


def _prompt_tables(estimate: StudyEstimate) -> list[dict[str, Any]]:
    """Per T2I model, its prompts' estimates with intervals, most male first (no score last)."""
    tables = []
    for model in estimate.models:
        if model.estimate is None:
            continue
        rows = [
            {"prompt": str(key), "warning": p.warning or ""}
            | {k: getattr(p, k) for k in ("estimate", "ci95", "n_images", "n_labelled")}
            for key, p in model.estimate.prompts.items()
        ]
        rows.sort(key=lambda r: (r["estimate"] is None, -(r["estimate"] or 0.0), r["prompt"]))
        tables.append({"t2i_model": model.t2i_model, "rows": rows})
    return tables


ESTIMAND = EstimandProtocol(
    key="gender",
    output_kind=KIND_GENDER,
    report=bias_estimate,
    labelled=labelled,
    humans=humans,
    verdicts=verdicts,
    design_pi=design_pi,
)
