"""How a detector's GEP agrees with the humans' (Kendall's tau-b, sign MCC, Pearson's r, ROC-AUC), and a
whole GEP study: every T2I model x setting cell and each detector's score ranking."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from metrics.gep import (
    AutoGep,
    GepItem,
    HumanGep,
    checked_auto_gep,
    checked_human_gep,
    checked_items,
    is_relevant,
)
from metrics.gep_design import ATTRIBUTE_KEYS, SETTINGS, YES

K = TypeVar("K", bound=Hashable)


def _paired(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"paired sequences differ in length ({xs.size} and {ys.size})")
    if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
        raise ValueError("paired sequences must hold finite numbers only")
    return xs, ys


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b (as scipy's); None with fewer than two values or a constant sequence."""
    xs, ys = _paired(x, y)
    n = xs.size
    if n < 2:
        return None
    balance = 0  # concordant minus discordant pairs
    untied_x = 0
    untied_y = 0
    # One row of the pair matrix at a time: O(n^2) time, O(n) memory, exact integer counts.
    for i in range(n - 1):
        sx = np.sign(xs[i + 1 :] - xs[i])
        sy = np.sign(ys[i + 1 :] - ys[i])
        balance += int(np.sum(sx * sy))
        untied_x += int(np.count_nonzero(sx))
        untied_y += int(np.count_nonzero(sy))
    if untied_x == 0 or untied_y == 0:
        return None
    return balance / math.sqrt(untied_x * untied_y)


def pearson_r(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r (as scipy's); None with fewer than two values or a constant sequence."""
    xs, ys = _paired(x, y)
    # Test constancy on the values themselves: the float mean of equal values need not equal them.
    if xs.size < 2 or np.all(xs == xs[0]) or np.all(ys == ys[0]):
        return None
    dx = xs - xs.mean()
    dy = ys - ys.mean()
    r = float(np.sum(dx * dy) / math.sqrt(float(np.sum(dx * dx)) * float(np.sum(dy * dy))))
    return max(-1.0, min(1.0, r))


def sign_mcc(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Matthews correlation of the signs (>= 0 positive) of two vectors; None with one sign only."""
    xs, ys = _paired(x, y)
    px, py = xs >= 0, ys >= 0
    if px.all() or not px.any() or py.all() or not py.any():
        return None
    from sklearn.metrics import matthews_corrcoef  # here, not at the top: slow to import

    return float(matthews_corrcoef(px, py))


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """ROC-AUC (Mann-Whitney, ties one half; as scikit-learn's); None without positives or negatives."""
    truth = np.asarray(labels, dtype=bool).ravel()
    values = np.asarray(scores, dtype=float).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError("scores must be finite numbers")
    if truth.shape != values.shape:
        raise ValueError(f"labels and scores differ in length ({truth.size} and {values.size})")
    n_pos = int(truth.sum())
    n_neg = truth.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    from scipy.stats import rankdata  # here, not at the top (docs/explanation/web-side.md)

    ranks = rankdata(values)  # average ranks for ties
    return float((ranks[truth].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mean_defined(values: Mapping[Any, float | None] | Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when none is (e.g. averaging per-attribute AUCs)."""
    pool = values.values() if isinstance(values, Mapping) else values
    defined = [v for v in pool if v is not None]
    return float(np.mean(defined)) if defined else None


@dataclass(frozen=True)
class VectorAgreement:
    """How an automatic GEP vector agrees with the human one over their shared keys (Tables 4 and 19)."""

    kendall_tau_b: float | None
    mcc: float | None
    pearson: float | None
    n: int


def vector_agreement(
    auto_vector: Mapping[str, float | None],
    human_vector: Mapping[str, float | None],
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> VectorAgreement:
    """Kendall tau-b, sign MCC and Pearson r between two GEP vectors over their shared defined keys."""
    used = [k for k in keys if auto_vector.get(k) is not None and human_vector.get(k) is not None]
    x = [float(auto_vector[k]) for k in used]  # type: ignore[arg-type]
    y = [float(human_vector[k]) for k in used]  # type: ignore[arg-type]
    return VectorAgreement(
        kendall_tau_b=kendall_tau_b(x, y),
        mcc=sign_mcc(x, y),
        pearson=pearson_r(x, y),
        n=len(used),
    )


@dataclass(frozen=True)
class RocAuc:
    """Per-attribute ROC-AUC of a detector's scores against the final answers (Tables 7 and 16)."""

    detector: str
    setting: str | None
    by_attribute: dict[str, float | None]
    n_positive: dict[str, int]
    n_negative: dict[str, int]
    mean: float | None
    n_defined: int


def attribute_roc_auc(
    items: Iterable[GepItem],
    *,
    detector: str,
    setting: str | None,
    keys: Sequence[str] = ATTRIBUTE_KEYS,
) -> RocAuc:
    """ROC-AUC per attribute over images with an answer and a score (``setting=None`` pools both)."""
    return checked_attribute_roc_auc(checked_items(items, keys), detector, setting, tuple(keys))


def checked_attribute_roc_auc(
    items: list[GepItem], detector: str, setting: str | None, keys: tuple[str, ...]
) -> RocAuc:
    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"setting {setting!r} is not one of {', '.join(SETTINGS)} (or None for both)")
    labels: dict[str, list[bool]] = {key: [] for key in keys}
    scores: dict[str, list[float]] = {key: [] for key in keys}
    for item in items:
        if setting is not None and item.setting != setting:
            continue
        by_key = item.scores.get(detector, {})
        for key in keys:
            answer = item.answers.get(key)
            score = by_key.get(key)
            if not is_relevant(item, key) or answer is None or score is None:
                continue
            labels[key].append(answer == YES)
            scores[key].append(float(score))
    by_attribute = {key: roc_auc(labels[key], scores[key]) for key in keys}
    return RocAuc(
        detector=detector,
        setting=setting,
        by_attribute=by_attribute,
        n_positive={key: sum(labels[key]) for key in keys},
        n_negative={key: len(labels[key]) - sum(labels[key]) for key in keys},
        mean=mean_defined(by_attribute),
        n_defined=sum(v is not None for v in by_attribute.values()),
    )


@dataclass(frozen=True)
class ScoreRanking:
    """Kendall tau-b between automatic and human GEP scores across cells (Table 6's last column)."""

    kendall_tau_b: float | None
    n_cells: int


def score_ranking(
    auto_scores: Mapping[K, float | None], human_scores: Mapping[K, float | None]
) -> ScoreRanking:
    """Rank agreement of GEP scores over the cells (e.g. (model, setting)) defined in both maps."""
    cells = [c for c, v in auto_scores.items() if v is not None and human_scores.get(c) is not None]
    tau = kendall_tau_b([auto_scores[c] for c in cells], [human_scores[c] for c in cells])  # type: ignore[misc]
    return ScoreRanking(kendall_tau_b=tau, n_cells=len(cells))


# --- A whole study --------------------------------------------------------------------------------


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
