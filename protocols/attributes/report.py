"""The GEP report of an attributes study as a plain dict (keys: docs/reference/contracts.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from metrics import gep, gep_agreement, gep_design
from metrics.agreement import fleiss_kappa_from_counts, krippendorff_alpha_from_counts
from protocols.attributes import selectors as asel
from reports import judges
from reports.selectors import Scope, final_answers, left_out_coverage
from studies.models import Question


def agreement(units: Sequence[Mapping[str, int]]) -> dict[str, Any]:
    """Krippendorff's alpha, Fleiss' kappa, observed agreement and items of units given as
    ``{answer: annotators}``; items with fewer than two labels are skipped."""
    values = sorted({value for unit in units for value in unit})
    counts = np.array([[unit.get(value, 0) for value in values] for unit in units], dtype=np.int64)
    counts = counts.reshape(len(units), len(values))
    fleiss = fleiss_kappa_from_counts(counts)
    return {
        "krippendorff_alpha": krippendorff_alpha_from_counts(counts).alpha,
        "fleiss_kappa": fleiss.kappa,
        "observed_agreement": fleiss.observed_agreement,
        "n_items": fleiss.n_items,
    }


#: The output kind of a judge on an attributes study: an answer yes / no per attribute.
JUDGE_KIND = "answers"
YES_NO = (gep_design.YES, gep_design.NO)


def _error(judge: float | None, people: float | None) -> float | None:
    return None if judge is None or people is None else judge - people


def judge_pictures(
    cells: dict[str, dict[str, dict[str, Any]]],
    items_by_model: Mapping[str, Sequence[gep.GepItem]],
    runs: Mapping[str, judges.JudgeRun],
    keys: Sequence[str],
) -> None:
    """Add to every (model, setting) cell of the report each judge's GEP, computed as the
    people's is but on the judge's answers, with its errors against the people's."""
    for cell in (c for by_setting in cells.values() for c in by_setting.values()):
        cell["judges"] = {}
    for name, run in runs.items():
        said: Mapping[Any, Mapping[str, str]] = run.answers  # keyed by item id, as a GEP item is
        judged = {
            model: [
                replace(
                    item,
                    answers={k: a for k in keys if (a := said.get(item.item_id, {}).get(k)) in YES_NO},
                    scores={},
                )
                for item in items
            ]
            for model, items in items_by_model.items()
        }
        picture = gep_agreement.gep_study(judged, detectors=[], keys=keys).as_dict()["attributes"]
        answered = {
            (model, item.setting) for model, items in judged.items() for item in items if item.answers
        }
        for model, by_setting in cells.items():
            for setting, cell in by_setting.items():
                mine = picture.get(model, {}).get(setting)
                if mine is None or (model, setting) not in answered:
                    continue
                cell["judges"][name] = {
                    "n_items": mine["n_items"],
                    "frequencies": mine["frequencies"],
                    "gep_vector": mine["gep_vector"],
                    "gep_score": mine["gep_score"],
                    "n_without_answer": mine["n_without_final_answer"],
                    "gep_vector_error": {
                        k: _error(mine["gep_vector"].get(k), cell["gep_vector"].get(k))
                        for k in cell["gep_vector"]
                    },
                    "gep_score_error": _error(mine["gep_score"], cell["gep_score"]),
                }


@dataclass(frozen=True)
class AttributesResult:
    """A computed GEP report with what its pages need besides the JSON."""

    report: dict[str, Any]
    keys: tuple[str, ...]
    questions: dict[str, str]
    study: gep_agreement.GepStudy
    pooled_auc: dict[str, dict[str, gep_agreement.RocAuc]]
    agreement_all: dict[str, Any]
    versions: dict[str, str]

    @property
    def detectors(self) -> tuple[str, ...]:
        return tuple(self.versions)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.study.cells)


def compute(
    scope: Scope, *, questions: Sequence[Question], labels_per_item: int, detector: str | None = None
) -> AttributesResult:
    """The GEP report of the items in scope (T2I model filter applied, category not);
    docs/explanation/protocols.md says what each part counts."""
    keys = tuple(question.key for question in questions)
    answers = final_answers(scope.narrowed(category=None), keys)
    rows = asel.gep_rows(scope, keys=keys, answers=answers, detector=detector)
    names = tuple(rows.versions)
    study = gep_agreement.gep_study(rows.items_by_model, detectors=names, keys=keys)
    pooled = {
        model: {
            name: gep_agreement.attribute_roc_auc(items, detector=name, setting=None, keys=keys)
            for name in names
        }
        for model, items in rows.items_by_model.items()
    }
    counts = asel.label_counts(scope, keys=keys)
    pooled_units = [unit for key in keys for unit in counts[key].values()]
    disputes = {
        key: sum(
            1
            for item_id, unit in counts[key].items()
            if sum(unit.values()) >= labels_per_item and key not in answers.get(item_id, {})
        )
        for key in keys
    }
    as_dict = study.as_dict()
    runs = judges.judge_runs(scope, kinds=[JUDGE_KIND], detector=detector)
    judge_pictures(as_dict["attributes"], rows.items_by_model, runs, keys)
    report = {
        "attributes": as_dict["attributes"],
        "agreement": {key: agreement(list(counts[key].values())) for key in keys},
        "score_ranking": as_dict["score_ranking"],
        "coverage": left_out_coverage(rows.n_items, rows.left_out),
        "disputes": disputes,
        "detector_versions": dict(rows.versions),
        **judges.judged([(key, YES_NO) for key in keys], runs, answers),
    }
    return AttributesResult(
        report=report,
        keys=keys,
        questions={question.key: question.text for question in questions},
        study=study,
        pooled_auc=pooled,
        agreement_all=agreement(pooled_units),
        versions=dict(rows.versions),
    )
