"""A whole GEP study: every T2I model x setting cell and each detector's score ranking."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metrics.gep import AutoGep, GepItem, HumanGep, checked_auto_gep, checked_human_gep, checked_items
from metrics.gep_agreement import (
    RocAuc,
    ScoreRanking,
    VectorAgreement,
    checked_attribute_roc_auc,
    score_ranking,
    vector_agreement,
)
from metrics.gep_design import (
    ATTRIBUTE_KEYS,
    SETTINGS,
)


@dataclass(frozen=True)
class DetectorCell:
    """One detector in one model x setting cell: its GEP, agreement with humans, ROC-AUC."""

    gep: AutoGep
    agreement: VectorAgreement
    roc_auc: RocAuc

    def as_dict(self) -> dict[str, Any]:
        return {
            "gep_vector": dict(self.gep.gep_vector),
            "gep_score": self.gep.gep_score,
            "kendall_tau_b": self.agreement.kendall_tau_b,
            "mcc": self.agreement.mcc,
            "pearson": self.agreement.pearson,
            "roc_auc": {"by_attribute": dict(self.roc_auc.by_attribute), "mean": self.roc_auc.mean},
        }


@dataclass(frozen=True)
class GepCell:
    """One model x setting: the human GEP and each detector's."""

    human: HumanGep
    detectors: dict[str, DetectorCell]

    def as_dict(self) -> dict[str, Any]:
        """``{n_items, frequencies, gep_vector, gep_score, n_without_final_answer, detectors}``."""
        return {
            "n_items": dict(self.human.n_items),
            "frequencies": {gender: dict(f) for gender, f in self.human.frequencies.items()},
            "gep_vector": dict(self.human.gep_vector),
            "gep_score": self.human.gep_score,
            "n_without_final_answer": {
                gender: dict(n) for gender, n in self.human.n_without_final_answer.items()
            },
            "detectors": {name: cell.as_dict() for name, cell in self.detectors.items()},
        }


def _detector_names(items: list[GepItem], detectors: Sequence[str] | None) -> tuple[str, ...]:
    if detectors is not None:
        return tuple(detectors)
    return tuple(sorted({name for item in items for name in item.scores}))


def _gep_cell(
    items: list[GepItem], setting: str, detectors: tuple[str, ...], keys: tuple[str, ...]
) -> GepCell:
    human = checked_human_gep(items, setting, keys)
    cells = {}
    for name in detectors:
        auto = checked_auto_gep(items, name, setting, keys)
        cells[name] = DetectorCell(
            gep=auto,
            agreement=vector_agreement(auto.gep_vector, human.gep_vector, keys),
            roc_auc=checked_attribute_roc_auc(items, name, setting, keys),
        )
    return GepCell(human=human, detectors=cells)


@dataclass(frozen=True)
class GepStudy:
    """All cells of a study by T2I model and setting, and each detector's score ranking."""

    cells: dict[str, dict[str, GepCell]]
    score_ranking: dict[str, ScoreRanking]

    def as_dict(self) -> dict[str, Any]:
        """``{"attributes": {model: {setting: cell}}, "score_ranking": {detector: tau or None}}``."""
        return {
            "attributes": {
                model: {setting: cell.as_dict() for setting, cell in by_setting.items()}
                for model, by_setting in self.cells.items()
            },
            "score_ranking": {name: ranking.kendall_tau_b for name, ranking in self.score_ranking.items()},
        }


def gep_study(
    items_by_model: Mapping[str, Iterable[GepItem]],
    *,
    detectors: Sequence[str] | None = None,
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> GepStudy:
    """Every model x setting cell and each detector's Kendall tau-b ranking against the human scores."""
    checked = {model: checked_items(items, keys) for model, items in items_by_model.items()}
    names = _detector_names([item for items in checked.values() for item in items], detectors)
    key_tuple = tuple(keys)
    cells: dict[str, dict[str, GepCell]] = {}
    for model, items in checked.items():
        present = {item.setting for item in items}
        cells[model] = {
            setting: _gep_cell(items, setting, names, key_tuple) for setting in SETTINGS if setting in present
        }
    human_scores = {(m, s): cell.human.gep_score for m, by_s in cells.items() for s, cell in by_s.items()}
    rankings = {
        name: score_ranking(
            {
                (m, s): cell.detectors[name].gep.gep_score
                for m, by_s in cells.items()
                for s, cell in by_s.items()
            },
            human_scores,
        )
        for name in names
    }
    return GepStudy(cells=cells, score_ranking=rankings)
