"""Power tuning (PPI++): the detector's cross-fitted weight λ in the prediction-powered estimate."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from metrics.ppi_model import CovarianceModel, fit_model
from metrics.ppi_shares import StudyData

#: Folds of the images for cross-fitting the detector's weight λ.
POWER_FOLDS = 5


# --- Power tuning (PPI++) -------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerTuning:
    """The detector's weight λ (PPI++), cross-fitted: per image, its mean, and the effective labels."""

    per_image: np.ndarray
    value: float
    effective_labels: float


def cross_fit_power(
    data: StudyData, model: CovarianceModel, output_index: np.ndarray, folds: int
) -> PowerTuning:
    n_labels = int(data.labelled.sum())
    n = data.codes.size
    folds = max(folds, 1)
    lab = data.labelled
    v = data.var_coef
    fold = np.arange(n) % folds

    def gradient(fitted: CovarianceModel) -> np.ndarray:
        # Gradients from the model's (EM) shares, steadier than the AIPW ones with few labels a prompt.
        with np.errstate(divide="ignore", invalid="ignore"):
            grad = np.nan_to_num(fitted.sensitivity, nan=0.0, posinf=0.0, neginf=0.0)
        return grad[data.codes] / data.n_per_prompt[data.codes, None]  # (n, 2)

    lambdas = np.ones(folds)
    for k in range(folds):
        train = lab & (fold != k) if folds > 1 else lab
        if not train.any():
            continue
        # Everything λ_k rests on -- the gradient's shares too -- comes from the other folds.
        fitted = fit_model(replace(data, labelled=train), output_index) if folds > 1 else model
        g_k = gradient(fitted)[train]
        gy = np.einsum("ij,ij->i", g_k, data.y[train])
        gf = np.einsum("ij,ij->i", g_k, data.f[train])
        den = float((v[train] * gf**2).sum())
        if den > 0:
            lambdas[k] = min(1.0, max(0.0, float((v[train] * gy * gf).sum()) / den))
    per_image = lambdas[fold]
    g = gradient(model)
    gy = np.where(lab, np.einsum("ij,ij->i", g, np.nan_to_num(data.y)), 0.0)
    gf = np.einsum("ij,ij->i", g, data.f)

    def variance(lam: np.ndarray) -> float:
        resid = gy - lam * gf
        ht = float((v * resid**2)[lab].sum())
        moments = model.moments_at(data.codes, output_index, lam[:, None] * data.f)
        modelled = float((data.design_var * np.einsum("ni,nij,nj->n", g, moments, g)).sum())
        return max(ht, modelled)

    v_now, v_labels = variance(per_image), variance(np.zeros(n))
    # Census (every variance 0): the labels are all there is, λ or not.
    effective = n_labels * v_labels / v_now if v_now > 0 else float(n_labels)
    return PowerTuning(per_image, float(lambdas.mean()), float(effective))
