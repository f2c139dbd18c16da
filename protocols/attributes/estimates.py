"""The attributes (GEP) few-label estimate: per T2I model and setting, each GEP vector entry
and the GEP score by ``metrics.ppi_mean`` (docs/explanation/estimator.md)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from detectors.kinds import KIND_ATTRIBUTES, answers_of, probabilities_of
from estimates import selectors as sel
from estimates.estimands import EstimandProtocol
from estimates.report import EstimateReport, drawn_arrays, drawn_frame, estimand_figures
from estimates.selectors import item_outputs as _outputs
from metrics import gep, gep_design, ppi_mean
from protocols.attributes.report import JUDGE_KIND
from protocols.attributes.selectors import gep_rows
from reports import judges
from reports.selectors import Scope, final_answers
from studies.models import Question, Study


def attribute_keys(study: Study) -> list[str]:
    return list(Question.objects.filter(study=study).order_by("position", "pk").values_list("key", flat=True))


def _cell(
    items: Sequence[gep.GepItem], keys: Sequence[str], detector: str, pi: dict[int, float], drawn: set[int]
) -> dict[str, Any]:
    n = len(items)
    p, sampled = drawn_arrays((item.item_id for item in items), pi, drawn)  # type: ignore[misc]
    woman = np.array([item.gender == gep_design.WOMAN for item in items])
    man = np.array([item.gender == gep_design.MAN for item in items])
    entries = []
    for key in keys:
        relevant = np.array([item.setting == gep_design.NEUTRAL or item.attribute == key for item in items])
        answer = [item.answers.get(key) for item in items]
        y = np.array([1.0 if a == gep_design.YES else 0.0 if a == gep_design.NO else np.nan for a in answer])
        raw = [item.scores.get(detector, {}).get(key) for item in items]
        known = np.array([s is not None for s in raw])
        fill = float(np.mean([s for s in raw if s is not None])) if known.any() else 0.0
        f = np.array([float(s) if s is not None else fill for s in raw])
        xi = sampled & relevant & np.isfinite(y)
        coef = ppi_mean.difference_coefficients(relevant & woman, relevant & man)
        entries.append(ppi_mean.Entry(f, np.where(xi, y, np.nan), coef, xi))
    score, vector = ppi_mean.estimate_mean_abs(entries, sampled, p)
    return {
        "gep_score": score.as_json(),
        "gep_vector": {key: est.as_json() for key, est in zip(keys, vector, strict=True)},
        "n_items": n,
        "n_labelled": int(sampled.sum()),
    }


class AttributesReport(EstimateReport):
    CELLS_KEY = "attributes"
    KEYS = ("t2i_model", "setting", "estimand")
    TABLE_KEY = "attributes_estimate"
    TITLE = "GEP estimated from {detector}@{version} and sampled labels"
    CAPTION = (
        "Per T2I model and setting, the GEP score (mean absolute entry) and each GEP vector "
        "entry (share of yes among women minus among men). Estimate: the detector's scores on every "
        "image corrected by the sampled labels, the detector weighted by λ (0: labels alone, 1: its "
        "full weight; chosen from the data). Labels only: the sampled labels alone. Effective labels: "
        "how many labels alone would give the same precision. The GEP score's interval bounds the "
        "error of the mean absolute entry whatever the true vector, so it stays valid with few labels "
        "(the point estimate is then too high)."
    )

    @classmethod
    def headline(cls, cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {
            f"{model} {setting} GEP score": cell["gep_score"]
            for model, settings in cells.items()
            for setting, cell in settings.items()
        }

    def rows(self) -> list[list[Any]]:
        out = []
        for model, settings in self.cells.items():
            for setting, cell in settings.items():
                named = [("gep_score", cell["gep_score"]), *cell["gep_vector"].items()]
                out += [[model, setting, name, *estimand_figures(est, cell)] for name, est in named]
        return out


def attributes_report(
    study: Study, detector: str, *, n_boot: int = 0, seed: int = 0, history: bool = False
) -> AttributesReport:
    """The GEP estimate per T2I model and setting; LookupError when the detector has no
    ``attributes`` predictions in the study."""
    start = drawn_frame(ESTIMAND, study, detector)
    version, warnings = start.version, start.warnings
    keys = attribute_keys(study)
    scope = Scope(study)
    rows = gep_rows(scope, keys=keys, answers=final_answers(scope, keys), detector=detector)
    if start.kind == JUDGE_KIND:
        rows = replace(rows, items_by_model=judge_scores(scope, rows.items_by_model, detector, version, keys))
    in_frame = {i.item_id for i in start.frame.items}

    def cells_for(pi: dict[int, float], drawn: set[int]) -> dict[str, dict[str, dict[str, Any]]]:
        cells: dict[str, dict[str, dict[str, Any]]] = {}
        for model, items in rows.items_by_model.items():
            for setting in gep_design.SETTINGS:
                chosen = [i for i in items if i.setting == setting and i.item_id in in_frame]
                if chosen:
                    cells.setdefault(model, {})[setting] = _cell(chosen, keys, detector, pi, drawn)
        return cells

    cells = cells_for(start.pi, start.drawn)
    if rows.left_out:
        warnings.append(f"{len(rows.left_out)} item(s) left out: {rows.left_out[0].reason} (first of them).")
    return AttributesReport.of_frame(start, cells, cells_for, history=history)


def judge_scores(
    scope: Scope,
    items_by_model: dict[str, list[gep.GepItem]],
    detector: str,
    version: str,
    keys: Sequence[str],
) -> dict[str, list[gep.GepItem]]:
    """The GEP items with a judge's scores per attribute (``yes_score``)."""
    run = judges.judge_runs(scope, kinds=[JUDGE_KIND], detector=detector).get(f"{detector}@{version}")
    if run is None:
        return items_by_model

    def score(item_id: Any, key: str) -> float | None:
        if not isinstance(item_id, int):
            return None
        return yes_score(run.probabilities.get(item_id, {}).get(key), run.answers.get(item_id, {}).get(key))

    return {
        model: [
            replace(item, scores={**item.scores, detector: {k: score(item.item_id, k) for k in keys}})
            for item in items
        ]
        for model, items in items_by_model.items()
    }


def yes_score(probabilities: Mapping[str, float] | None, answer: str | None) -> float | None:
    """A judge's score of an attribute: its probability of yes normalised over yes and no when it
    gave probabilities, else 1 for yes and 0 for no; None when it did not answer."""
    if probabilities:
        yes, no = (
            max(0.0, probabilities.get(gep_design.YES, 0.0)),
            max(0.0, probabilities.get(gep_design.NO, 0.0)),
        )
        if yes + no > 0:
            return yes / (yes + no)
    return 1.0 if answer == gep_design.YES else 0.0 if answer == gep_design.NO else None


def item_scores(study: Study, detector: str, version: str) -> list[tuple[int, dict[str, float]]]:
    """(item id, {attribute: score}) of the detector's ok outputs at ``version``: an attributes
    detector's scores, or, when it has none there, a judge's (``yes_score``)."""
    out = [
        (item_id, {k: float(v) for k, v in ((output or {}).get("scores") or {}).items() if _number(v)})
        for item_id, output in _outputs(study, detector, version, KIND_ATTRIBUTES)
    ]
    if out:
        return out
    for item_id, output in _outputs(study, detector, version, JUDGE_KIND):
        answers, probabilities = answers_of(output), probabilities_of(output)
        scores = {
            key: yes_score(probabilities.get(key), answers.get(key)) for key in {*answers, *probabilities}
        }
        out.append((item_id, {k: v for k, v in scores.items() if v is not None}))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def attribute_output_codes(study: Study, detector: str, version: str) -> dict[int, Hashable]:
    """item id -> how many attributes the detector scores 0.5 or more (0, 1, 2, 3+): the
    stratified design's detector output."""
    return {
        item_id: min(3, sum(1 for v in scores.values() if v >= 0.5))
        for item_id, scores in item_scores(study, detector, version)
    }


def attribute_residuals(study: Study, detector: str, version: str) -> dict[int, float]:
    """item id -> Σ over its answered attributes of (score - [yes])²: the stratified and active designs'
    error spread."""
    answers = final_answers(Scope(study), attribute_keys(study))
    out: dict[int, float] = {}
    for item_id, scores in item_scores(study, detector, version):
        given = answers.get(item_id, {})
        terms = [
            (scores[k] - (1.0 if v == gep_design.YES else 0.0)) ** 2
            for k, v in given.items()
            if k in scores and v in (gep_design.YES, gep_design.NO)
        ]
        if terms:
            out[item_id] = float(sum(terms))
    return out


ESTIMAND = EstimandProtocol(
    key="attributes",
    output_kind=KIND_ATTRIBUTES,
    report=attributes_report,
    labelled=sel.items_fully_labelled,
    output_codes=attribute_output_codes,
    residuals=attribute_residuals,
    judge_kind=JUDGE_KIND,
)
