"""The pair-change few-label estimate: per T2I model, domain and attribute, the share of pairs
people judge changed, by ``metrics.ppi_mean`` (docs/explanation/protocols.md)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from annotate.models import FinalLabel
from detectors.kinds import KIND_MEASUREMENTS
from estimates import selectors as sel
from estimates.estimands import EstimandProtocol
from estimates.report import EstimateReport, drawn_arrays, drawn_frame, estimand_figures
from metrics import pair_change as pc
from metrics import ppi_mean
from protocols.pair_change.sampling import MeasureSourceError, pair_measurements, study_thresholds
from protocols.pair_change.selectors import QuestionMismatch, human_labels
from studies.models import Item, Study

NOT_CHANGED = frozenset({pc.UNCHANGED, pc.MALE_TO_MALE, pc.FEMALE_TO_FEMALE})


def _changed_score(score: pc.PairScore | None, attribute: str) -> float:
    if score is None or not score.measured(attribute):
        return 0.5
    if attribute == pc.GENDER:
        return 1.0 if score.seed_gender != score.output_gender else 0.0
    return float(np.clip((abs(score.score(attribute)) - 0.2) / 0.8, 0.0, 1.0))


def _judged(study: Study, labels: dict[str, dict[str, str]]) -> dict[tuple[int, str], str]:
    """(item id, attribute) -> the verdict of its final answer (``labels``: ``human_labels``)."""
    answers: dict[tuple[int, str], str] = {}
    for item_id, key, value in FinalLabel.objects.filter(
        item__study=study, question__key__in=pc.ATTRIBUTES
    ).values_list("item_id", "question__key", "value"):
        label = labels[key].get(value)
        if label is not None:
            answers[(item_id, key)] = label
    return answers


class PairChangeReport(EstimateReport):
    CELLS_KEY = "pair_change"
    KEYS = ("t2i_model", "domain", "attribute")
    UNIT = "pair(s)"
    TABLE_KEY = "pair_change_estimate"
    TITLE = "Changed pairs estimated from the measurements and sampled labels ({detector}@{version})"
    CAPTION = (
        "Per T2I model, domain and attribute, the share of pairs whose attribute changed as "
        "people judge it. Estimate: the measurements on every pair corrected by the sampled labels, "
        "weighted by λ (0: labels alone, 1: the detector's full weight). Labels only: the sampled "
        "labels alone. Effective labels: how many labels alone would give the same precision."
    )

    @classmethod
    def headline(cls, cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            f"{model} {domain} {attribute}": est
            for model, domains in cells.items()
            for domain, attributes in domains.items()
            for attribute, est in attributes.items()
        }

    def rows(self) -> list[list[Any]]:
        out = []
        for model, domains in self.cells.items():
            for domain, attributes in domains.items():
                for attribute, est in attributes.items():
                    out.append([model, domain, attribute, *estimand_figures(est, est)])
        return out


def pair_change_report(
    study: Study, detector: str, *, n_boot: int = 0, seed: int = 0, history: bool = False
) -> PairChangeReport:
    """The changed-pair shares per T2I model, domain and attribute; LookupError (with the reason)
    when the study's measurements or questions cannot be read."""
    start = drawn_frame(ESTIMAND, study, detector, "label its pairs")
    warnings = start.warnings
    try:
        labels = human_labels(study)
        measured = pair_measurements(study)
        thresholds = study_thresholds(study)
    except (QuestionMismatch, MeasureSourceError, pc.PairChangeInputError) as error:
        raise LookupError(str(error)) from None
    scores = {row.item_id: pc.score_pair(row.pair, thresholds) for row in measured.rows}
    if measured.left_out:
        warnings.append(
            f"{len(measured.left_out)} pair(s) not measured yet count as 0.5 for the detector "
            f"({measured.left_out[0].reason}, first of them)."
        )
    answers = _judged(study, labels)
    in_frame = {i.item_id for i in start.frame.items}
    items = [
        row
        for row in Item.objects.filter(study=study)
        .order_by("t2i_model", "pk")
        .values_list("pk", "t2i_model", "prompt__category")
        if row[0] in in_frame
    ]
    ids = np.array([row[0] for row in items])
    models = np.array([row[1] for row in items], dtype=object)
    domains = np.array([row[2] or "" for row in items], dtype=object)

    def cells_for(pi: dict[int, float], drawn: set[int]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        return _cells(ids, models, domains, answers, scores, *drawn_arrays(ids, pi, drawn))

    cells = cells_for(start.pi, start.drawn)
    return PairChangeReport.of_frame(start, cells, cells_for, history=history)


def _cells(
    ids: np.ndarray,
    models: np.ndarray,
    domains: np.ndarray,
    answers: dict[tuple[int, str], str],
    scores: dict[int, pc.PairScore],
    p: np.ndarray,
    sampled: np.ndarray,
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    cells: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for model in dict.fromkeys(models):
        for domain in dict.fromkeys(domains[models == model]):
            mask = (models == model) & (domains == domain)
            for attribute in pc.ATTRIBUTES:
                given = [answers.get((int(i), attribute)) for i in ids]
                y = np.array([np.nan if a is None else float(a not in NOT_CHANGED) for a in given])
                f = np.array([_changed_score(scores.get(int(i)), attribute) for i in ids])
                xi = sampled & np.isfinite(y)
                est = ppi_mean.estimate_linear(
                    f, np.where(xi, y, np.nan), xi, p, ppi_mean.mean_coefficients(mask), bounds=(0.0, 1.0)
                )
                cells.setdefault(str(model), {}).setdefault(str(domain), {})[attribute] = {
                    **est.as_json(),
                    "n_items": int(mask.sum()),
                    "n_labelled": int((xi & mask).sum()),
                }
    return cells


def _scores(study: Study) -> dict[int, pc.PairScore]:
    """item id -> the pair's score from the report's measurements (empty when they cannot be read)."""
    try:
        measured = pair_measurements(study)
        thresholds = study_thresholds(study)
    except (MeasureSourceError, pc.PairChangeInputError):
        return {}
    return {row.item_id: pc.score_pair(row.pair, thresholds) for row in measured.rows}


def pair_output_codes(study: Study, detector: str, version: str) -> dict[int, Hashable]:
    """item id -> per attribute the detector value rounded to 0, 0.5 or 1 (unchanged, in between
    or not measured, changed): the designs' detector output."""
    return {
        item_id: tuple(round(2 * _changed_score(score, a)) / 2 for a in pc.ATTRIBUTES)
        for item_id, score in _scores(study).items()
    }


def pair_residuals(study: Study, detector: str, version: str) -> dict[int, float]:
    """item id -> Σ over its judged attributes of (detector value - [changed])², for the pairs
    with final answers: the designs' error spread."""
    try:
        labels = human_labels(study)
    except QuestionMismatch:
        return {}
    scores = _scores(study)
    out: dict[int, float] = {}
    for (item_id, key), label in _judged(study, labels).items():
        f = _changed_score(scores.get(item_id), key)
        out[item_id] = out.get(item_id, 0.0) + (f - float(label not in NOT_CHANGED)) ** 2
    return out


ESTIMAND = EstimandProtocol(
    key="pair_change",
    output_kind=KIND_MEASUREMENTS,
    report=pair_change_report,
    labelled=sel.items_fully_labelled,
    output_codes=pair_output_codes,
    residuals=pair_residuals,
)
