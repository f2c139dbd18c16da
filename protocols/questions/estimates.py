"""The questions protocol's few-label estimate: per question, T2I model and group, each
answer's share and the largest gap between groups (docs/explanation/estimator.md)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from detectors.kinds import answers_of
from estimates import selectors as sel
from estimates.estimands import EstimandProtocol
from estimates.report import EstimateReport, census_cells, drawn_arrays, drawn_frame, estimand_figures
from estimates.selectors import item_outputs as _outputs
from metrics import ppi_mean
from protocols.questions import selectors as qsel
from protocols.questions.analysis import choice_questions
from protocols.questions.spec import KIND_ANSWERS
from reports import judges
from reports.analyses import AnalysisError
from reports.selectors import Scope, final_answers
from studies.models import Item, Question, Study


class QuestionsEstimateReport(EstimateReport):
    CELLS_KEY = "questions"
    KEYS = ("question", "t2i_model", "estimand", "group", "answer")
    TABLE_KEY = "questions_estimate"
    TITLE = "Answer shares estimated from {detector}@{version} and sampled labels"
    CAPTION = (
        "Per question and T2I model, each answer's share per group and the largest gap between two "
        "groups' shares (max_gap). Estimate: the detector's answers on every image corrected by the "
        "sampled labels, the detector weighted by λ (0: labels alone, 1: its full weight; chosen from "
        "the data). Labels only: the sampled labels alone. Effective labels: how many labels alone would "
        "give the same precision. The max_gap interval bounds the error of the largest gap whatever the "
        "true shares, so it stays valid with few labels (the point estimate is then too high)."
    )

    @classmethod
    def headline(cls, cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Per question and model, the max_gap of the answer whose gap the estimate finds largest."""
        out = {}
        for key, models in cells.items():
            for model, cell in models.items():
                gaps = cell["max_gap"]
                answer = max(gaps, key=lambda a: gaps[a]["estimate"] or 0.0)
                out[f"{key} {model} max_gap"] = gaps[answer]
        return out

    def rows(self) -> list[list[Any]]:
        out = []
        for key, models in self.cells.items():
            for model, cell in models.items():
                for group, g in cell["groups"].items():
                    for answer, est in g["shares"].items():
                        out.append([key, model, "share", group, answer, *estimand_figures(est, g)])
                for answer, est in cell["max_gap"].items():
                    out.append([key, model, "max_gap", "", answer, *estimand_figures(est, cell)])
        return out


def _question_cell(
    question: Question,
    ids: np.ndarray,
    models: np.ndarray,
    groups: np.ndarray,
    asks: np.ndarray,
    finals: dict[int, dict[str, str]],
    said: dict[int, dict[str, str]],
    probabilities: dict[int, dict[str, dict[str, float]]],
    p: np.ndarray,
    sampled: np.ndarray,
    seed: int,
) -> dict[str, Any]:
    values = question.values
    given = [finals.get(int(i), {}).get(question.key) for i in ids]
    answered = np.array([a in values for a in given])
    detector = [said.get(int(i), {}).get(question.key) for i in ids]
    known = np.array([d in values for d in detector])
    soft = [answer_probabilities(probabilities.get(int(i), {}).get(question.key), values) for i in ids]
    out: dict[str, Any] = {}
    for model in dict.fromkeys(models[asks]):
        in_model = asks & (models == model)
        names = sorted({str(g) for g in groups[in_model] if g})
        if not names:
            continue
        masks = {name: in_model & (groups == name) for name in names}
        p, sampled = census_cells(p, sampled, answered, list(masks.values()))
        xis = {name: sampled & mask & answered for name, mask in masks.items()}
        cell_groups: dict[str, Any] = {
            name: {"shares": {}, "n_items": int(masks[name].sum()), "n_labelled": int(xi.sum())}
            for name, xi in xis.items()
        }
        gaps: dict[str, Any] = {}
        for answer in values:
            y = np.array([1.0 if a == answer else 0.0 for a in given])
            f_raw = np.array(
                [q[answer] if q else 1.0 if d == answer else 0.0 for d, q in zip(detector, soft, strict=True)]
            )
            entries = []
            for name, mask in masks.items():
                fill = float(f_raw[mask & known].mean()) if np.any(mask & known) else 0.0
                f = np.where(known, f_raw, fill)
                coef = ppi_mean.mean_coefficients(mask)
                entries.append(ppi_mean.Entry(f, np.where(xis[name], y, np.nan), coef, xis[name]))
            gap, shares = ppi_mean.estimate_max_gap(entries, sampled, p, seed=seed)
            for name, est in zip(names, shares, strict=True):
                cell_groups[name]["shares"][answer] = est.as_json()
            gaps[answer] = gap.as_json()
        n_items = int(in_model.sum())
        out[str(model)] = {
            "groups": cell_groups,
            "max_gap": gaps,
            "n_items": n_items,
            "n_labelled": int((sampled & in_model & answered).sum()),
        }
    return out


def answer_probabilities(given: dict[str, float] | None, values: list[str]) -> dict[str, float] | None:
    """A judge's probabilities of a question's values, normalised over them; None when it gave
    none (or none of them is positive): its hard answer is then the prediction."""
    if not given:
        return None
    total = sum(max(0.0, float(given.get(v, 0.0))) for v in values)
    if total <= 0:
        return None
    return {v: max(0.0, float(given.get(v, 0.0))) / total for v in values}


def questions_report(
    study: Study, detector: str, *, n_boot: int = 0, seed: int = 0, history: bool = False
) -> QuestionsEstimateReport:
    """Answer shares per question, T2I model and group, and ``max_gap`` per answer; LookupError
    when the study cannot be estimated."""
    start = drawn_frame(ESTIMAND, study, detector)
    version, warnings = start.version, start.warnings
    try:
        questions = choice_questions(study)
    except AnalysisError as error:
        raise LookupError(str(error)) from None
    scope = Scope(study)
    column = qsel.compare_column(study)
    item_groups = qsel.item_groups(scope, column)
    finals = final_answers(scope)
    versions, answers = qsel.detector_answers(scope, detector=detector)
    if versions.get(detector) != version:
        warnings.append(
            f"The answers read are of {detector}@{versions.get(detector)}, the rounds of version {version}."
        )
    said = answers.get(detector, {})
    run = judges.judge_runs(scope, kinds=[KIND_ANSWERS], detector=detector).get(
        f"{detector}@{versions.get(detector)}"
    )
    probabilities = run.probabilities if run is not None else {}
    in_frame = [i.item_id for i in start.frame.items]
    # The questions each item asks, read for the whole study (a list of ids would pass SQLite's limit).
    framed = set(in_frame)
    asked = {
        pk: keys
        for pk, keys in Item.objects.filter(study=study)
        .values_list("pk", "question_keys")
        .iterator(chunk_size=10_000)
        if keys and pk in framed
    }
    ids = np.array(in_frame, dtype=np.int64)
    models = np.array([item_groups.get(i, ("", ""))[0] for i in in_frame], dtype=object)
    groups = np.array([item_groups.get(i, ("", ""))[1] for i in in_frame], dtype=object)
    without_group = int(np.sum(groups == ""))
    if without_group:
        warnings.append(
            f"{without_group} item(s) have no value in the compared column '{column}' and are left out."
        )
    asks_of = {
        q.key: np.array([not asked.get(i) or q.key in asked[i] for i in in_frame], dtype=bool)
        & (groups != "")
        for q in questions
    }

    def cells_for(pi: dict[int, float], drawn: set[int]) -> dict[str, dict[str, Any]]:
        p, sampled = drawn_arrays(in_frame, pi, drawn)
        return {
            q.key: _question_cell(
                q, ids, models, groups, asks_of[q.key], finals, said, probabilities, p, sampled, seed
            )
            for q in questions
        }

    cells = cells_for(start.pi, start.drawn)
    return QuestionsEstimateReport.of_frame(start, cells, cells_for, history=history)


def answer_output_codes(study: Study, detector: str, version: str) -> dict[int, Hashable]:
    """item id -> the detector's answers, as a sorted tuple of (question, answer): the stratified
    design's detector output."""
    return {
        item_id: tuple(sorted(answers_of(output).items()))
        for item_id, output in _outputs(study, detector, version, KIND_ANSWERS)
    }


def answer_residuals(study: Study, detector: str, version: str) -> dict[int, float]:
    """item id -> how many of its final answers the detector's answers differ from (labelled
    items): the stratified and active designs' error spread."""
    finals = final_answers(Scope(study))
    return {
        item_id: float(
            sum(1 for key, value in finals[item_id].items() if answers_of(output).get(key) != value)
        )
        for item_id, output in _outputs(study, detector, version, KIND_ANSWERS)
        if item_id in finals
    }


ESTIMAND = EstimandProtocol(
    key="questions",
    output_kind=KIND_ANSWERS,
    report=questions_report,
    labelled=sel.items_fully_labelled,
    output_codes=answer_output_codes,
    residuals=answer_residuals,
)
