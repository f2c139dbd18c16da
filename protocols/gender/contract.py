"""The shape of ``bias_report --format json`` for a gender study (docs/reference/contracts.md)."""

from __future__ import annotations

from typing import Any, TypedDict

from reports.selectors import Coverage

#: [low, high] of a 95 % interval, or None when the figure has none.
Interval = list[float] | None


class Agreement(TypedDict):
    cohen_kappa: float | None
    n_images: int


class HumanModel(TypedDict):
    """The human ground truth of one T2I model (the paper's equations 1-2 on final labels)."""

    model_bias_score: float | None
    ci95: Interval
    categories: dict[str, float | None]
    label_shares: dict[str, float | None]
    n_images: int
    n_prompts_scored: int
    prompts: list[dict[str, Any]]


class Filtering(TypedDict):
    """Equations 4-5: the detector's filter against the human "low quality / other"."""

    precision: float | None
    recall: float | None
    f1: float | None
    filter_rate: float | None
    tp: int
    fp: int
    fn: int
    tn: int


class Accuracy(TypedDict):
    """Equation 6 on the images both call male or female."""

    male: float | None
    female: float | None
    overall: float | None
    n_male: int
    n_female: int


class DetectorModel(TypedDict):
    """One detector on one T2I model, against the human labels of the same images."""

    model_bias_score: float | None
    pct_diff: float | None
    prompt_bias_score_difference: float | None
    ci95: Interval
    model_bias_score_ci95: Interval
    prompt_bias_score_difference_ci95: Interval
    human_model_bias_score: float | None
    n_images: int


class Detector(TypedDict):
    version: str
    filtering: Filtering
    accuracy: Accuracy
    per_model: dict[str, DetectorModel]


class GenderReport(TypedDict):
    """The whole JSON object: ``human`` and each detector's ``per_model`` are keyed by T2I model."""

    coverage: Coverage
    agreement: Agreement
    human: dict[str, HumanModel]
    detectors: dict[str, Detector]
    #: Every run ``<detector>@<version>`` against the final answers on clear images (``reports.judges``).
    judges: dict[str, dict[str, dict[str, Any]]]
    #: Two versions of one detector: ``{"<d>@<v1> vs <d>@<v2>": {"gender": {n, agreement, cohen_kappa}}}``.
    judge_versions: dict[str, dict[str, dict[str, Any]]]
