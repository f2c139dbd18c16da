"""The covariance model of the detector's errors, E[r rᵀ | detector output, prompt]."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from metrics.ppi_shares import (
    CLASS_VECTORS,
    LabelledSample,
    OutputCodes,
    PromptIds,
    StudyData,
    class_counts,
    human_classes,
    prepare,
    prompt_codes,
    sum_by_prompt,
)

#: Pseudo-count of every (human class, detector output) cell of the confusion.
SMOOTHING = 0.5
#: Images' worth of the pooled class shares in each prompt's EM prior.
PRIOR_IMAGES = 0.1


@dataclass(frozen=True)
class CovarianceModel:
    """The detector's confusion, each prompt's class shares, the output vectors and the score gradients."""

    outputs: tuple[int, ...]
    output_vectors: np.ndarray
    likelihood: np.ndarray
    confusion_counts: np.ndarray
    prompt_keys: tuple[Hashable, ...]
    prompt_shares: np.ndarray
    sensitivity: np.ndarray

    def output_index(self, detector_outputs: OutputCodes) -> np.ndarray:
        outs = np.asarray(detector_outputs, dtype=np.int64)
        table = np.asarray(self.outputs, dtype=np.int64)
        index = np.searchsorted(table, outs)
        index = np.minimum(index, len(table) - 1)
        if outs.size and not (table[index] == outs).all():
            raise ValueError("Detector output codes the covariance model has not seen.")
        return index

    def prompt_index(self, prompt_ids: PromptIds) -> np.ndarray:
        lookup = {k: i for i, k in enumerate(self.prompt_keys)}
        keys, codes = prompt_codes(prompt_ids)
        index = np.array([lookup.get(k, -1) for k in keys], dtype=np.int64)
        if (index < 0).any():
            raise ValueError("Prompt ids the covariance model has not seen.")
        return index[codes] if codes.size else codes

    def posterior(self, prompt_index: np.ndarray, output_index: np.ndarray) -> np.ndarray:
        """(n, 3) P(human class | detector output, prompt)."""
        joint = self.likelihood[:, output_index].T * self.prompt_shares[prompt_index]
        return joint / joint.sum(axis=1, keepdims=True)

    def moments_at(
        self, prompt_index: np.ndarray, output_index: np.ndarray, f: np.ndarray | None
    ) -> np.ndarray:
        post = self.posterior(prompt_index, output_index)
        f_arr = self.output_vectors[output_index] if f is None else np.asarray(f, dtype=float)
        diff = CLASS_VECTORS[None, :, :] - f_arr[:, None, :]  # (n, 3 classes, 2)
        return np.einsum("nc,nci,ncj->nij", post, diff, diff)


def _output_codes(f: np.ndarray) -> np.ndarray:
    """One code per distinct detector vector (the default outputs: the verdicts)."""
    if f.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(f, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def detector_codes(data: StudyData, detector_outputs: OutputCodes | None) -> np.ndarray:
    """Each image's detector output code: ``detector_outputs``, else one code per distinct f."""
    outputs = _output_codes(data.f) if detector_outputs is None else np.asarray(detector_outputs, np.int64)
    if outputs.shape != (data.codes.size,):
        raise ValueError("detector_outputs must be one code per image.")
    return outputs


def fit_model(data: StudyData, outputs: np.ndarray) -> CovarianceModel:
    """Confusion from the labelled images (each cell starting at ``SMOOTHING``), then each prompt's
    class shares by EM (``PRIOR_IMAGES`` images' worth of the pooled shares added)."""
    table, out_index = np.unique(outputs, return_inverse=True)
    out_index = out_index.reshape(-1)
    n_out = table.size
    vectors = np.zeros((n_out, 2))
    if n_out:
        vectors = sum_by_prompt(out_index, data.f, n_out) / np.bincount(out_index, minlength=n_out)[:, None]
    counts = np.full((3, max(n_out, 1)), SMOOTHING)
    lab = data.labelled
    known = human_classes(data.y)
    pooled = np.full(3, 1 / 3)
    if lab.any():
        # Weights 1/π rescaled to a mean of 1: counts in units of labels.
        weight = (1.0 / data.pi_at[lab]) / (1.0 / data.pi_at[lab]).mean()
        np.add.at(counts, (known[lab], out_index[lab]), weight)
        # The pooled class shares, with one label's worth of each class so none is ruled out.
        pooled = (np.bincount(known[lab], weights=weight, minlength=3) + 1.0) / (weight.sum() + 3.0)
    likelihood = counts / counts.sum(axis=1, keepdims=True)
    shares = _em_shares(data, likelihood, out_index, known, pooled, PRIOR_IMAGES)
    clear = shares[:, 0] + shares[:, 1]
    sensitivity = np.stack([2 * shares[:, 1], -2 * shares[:, 0]], axis=1) / (clear**2)[:, None]
    return CovarianceModel(
        tuple(int(t) for t in table), vectors, likelihood, counts, data.keys, shares, sensitivity
    )


def output_counts(data: StudyData, output_index: np.ndarray, n_out: int) -> np.ndarray:
    """(P, outputs) unlabelled images per prompt and detector output."""
    lab = data.labelled
    cells = data.codes[~lab] * n_out + output_index[~lab]
    return np.bincount(cells, minlength=data.n_prompts * n_out).reshape(data.n_prompts, n_out)


def _em_shares(
    data: StudyData,
    likelihood: np.ndarray,
    output_index: np.ndarray,
    known: np.ndarray,
    pooled: np.ndarray,
    prior_images: float,
) -> np.ndarray:
    """(P, 3) maximum-likelihood class shares per prompt (EM over counts per prompt and output)."""
    n_prompts, n_out = data.n_prompts, likelihood.shape[1]
    fixed = class_counts(data, known)
    cells = output_counts(data, output_index, n_out)
    # One EM step as two small matrix products over (prompt, output) counts, not a 3-d array.
    prior = prior_images * pooled[None, :] + fixed
    total = data.n_per_prompt[:, None] + prior_images
    cells = cells.astype(float)
    lik_t = np.ascontiguousarray(likelihood.T)
    shares = np.repeat(pooled[None, :], n_prompts, axis=0)
    for _ in range(500):
        new = (prior + shares * ((cells / (shares @ likelihood)) @ lik_t)) / total
        if np.abs(new - shares).max() < 1e-7:
            return new
        shares = new
    return shares


def fit_covariance_model(sample: LabelledSample) -> CovarianceModel:
    """``CovarianceModel`` from the labelled images of ``sample`` so far."""
    data = prepare(sample)
    if not data.labelled.any():
        raise ValueError("No labelled image to learn from: draw the first round uniformly.")
    outputs = detector_codes(data, sample.detector_outputs)
    return fit_model(data, outputs)
