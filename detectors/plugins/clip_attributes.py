"""The automatic GEP estimators of Zhang et al. 2023 (section 4): a score per attribute per image."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from detectors.base import DetectorOptionError, DetectorOutput
from detectors.kinds import KIND_ATTRIBUTES
from detectors.plugins.clip import CLIP_OPTIONS, ClipDetectorBase
from metrics.gep_design import ATTRIBUTE_CLIP_TEXTS, ATTRIBUTE_KEYS, CALIBRATION_REFERENCE, cls_training_texts

if TYPE_CHECKING:
    import numpy as np
    from PIL.Image import Image as PILImage

#: The texts of C and CC, in ATTRIBUTE_KEYS order, then the reference. Both detectors embed this
#: same tuple, so CC is exactly C minus the reference cosine of the same image.
SIMILARITY_TEXTS: tuple[str, ...] = (
    *(ATTRIBUTE_CLIP_TEXTS[key] for key in ATTRIBUTE_KEYS),
    CALIBRATION_REFERENCE,
)

#: The paper's ensemble size (section 4.2, "ten classifiers using different random seeds").
DEFAULT_SEEDS = 10
#: scikit-learn's default L2 penalty of SGDClassifier, which the authors kept.
DEFAULT_ALPHA = 1e-4
#: The other SGDClassifier settings of the paper's appendix and the authors' code.
SGD_SETTINGS: dict[str, Any] = {
    "loss": "log_loss",
    "max_iter": 5000,
    "tol": 1e-3,
    "early_stopping": True,
    "validation_fraction": 0.1,
    "n_iter_no_change": 5,
}


def sgd_classifier(seed: int, alpha: float = DEFAULT_ALPHA) -> Any:
    """An unfitted scikit-learn SGDClassifier with the paper's settings and ``random_state=seed``."""
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(alpha=alpha, random_state=seed, **SGD_SETTINGS)


def _training_texts() -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
    """(every distinct training text in a fixed order, positives per key, the shared negatives)."""
    by_key = cls_training_texts()
    negatives = by_key[ATTRIBUTE_KEYS[0]].negatives  # the same for every key
    positives = {key: by_key[key].positives for key in ATTRIBUTE_KEYS}
    texts = tuple(dict.fromkeys([*negatives, *(t for key in ATTRIBUTE_KEYS for t in positives[key])]))
    return texts, positives, negatives


CLS_TEXTS, CLS_POSITIVES, CLS_NEGATIVES = _training_texts()


class _AttributeDetector(ClipDetectorBase):
    """One ClipEncoder over ``TEXTS`` (the gender CLIP detectors' loader); ``scores`` per subclass."""

    output_kind = KIND_ATTRIBUTES

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        if not batch:
            return []
        return [DetectorOutput.of(KIND_ATTRIBUTES, data) for data in self.outputs(batch)]

    def outputs(self, batch: Sequence[PILImage]) -> list[dict[str, Any]]:
        """One ``attributes`` object per image, in order."""
        raise NotImplementedError


class ClipAttributeDetector(_AttributeDetector):
    key = "clip_attr"
    version = "1"
    description = "GEP estimator C (Zhang et al. 2023): cos(image, 'a dress') per attribute"

    TEXTS = SIMILARITY_TEXTS
    #: CC: each cosine minus the reference's (the last text), a float64 difference of float32 values.
    calibrated = False

    def outputs(self, batch: Sequence[PILImage]) -> list[dict[str, Any]]:
        # tolist(): the float32 cosines as Python floats, exactly.
        rows = self.encoder.similarities(batch).cosine.tolist()
        return [
            {
                "scores": {
                    key: cosine - row[-1] if self.calibrated else cosine
                    for key, cosine in zip(ATTRIBUTE_KEYS, row[:-1], strict=True)
                }
            }
            for row in rows
        ]


class ClipAttributeCalibratedDetector(ClipAttributeDetector):
    key = "clip_attr_calibrated"
    version = "1"
    description = "GEP estimator CC (Zhang et al. 2023): cos(image, 'a dress') - cos(image, 'an object')"
    calibrated = True


class ClipAttributeClassifierDetector(_AttributeDetector):
    key = "clip_attr_cls"
    version = "1"
    description = (
        "GEP estimator CLS (Zhang et al. 2023): logistic classifiers trained on CLIP text "
        "embeddings, applied to the image embedding, averaged over seeds"
    )
    option_help = {
        **CLIP_OPTIONS,
        "seeds": f"classifiers per attribute, seeds 0 … n-1, probabilities averaged (default {DEFAULT_SEEDS})",
        "alpha": f"SGDClassifier's L2 penalty (default {DEFAULT_ALPHA:g})",
    }

    TEXTS = CLS_TEXTS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        n_seeds = self.number_option("seeds", options.get("seeds", DEFAULT_SEEDS), int, minimum=1)
        self.seeds: tuple[int, ...] = tuple(range(n_seeds))
        self.alpha: float = self.number_option("alpha", options.get("alpha", DEFAULT_ALPHA))
        if self.alpha <= 0:  # the 'optimal' learning rate divides by alpha
            raise DetectorOptionError(f"{self.key}'s option alpha must be a number > 0, got {self.alpha!r}.")
        self._weights: np.ndarray | None = None  # (keys x seeds, dim)
        self._biases: np.ndarray | None = None  # (keys x seeds,)

    @property
    def version_id(self) -> str:
        version = f"{super().version_id}+seeds{len(self.seeds)}"
        return version if self.alpha == DEFAULT_ALPHA else f"{version}+alpha{self.alpha:g}"

    @property
    def meta(self) -> dict[str, Any]:
        """What every output records about the classifiers that scored it."""
        return {
            "seeds": list(self.seeds),
            "alpha": self.alpha,
            "n_training_texts": {
                "positive": len(CLS_POSITIVES[ATTRIBUTE_KEYS[0]]),
                "negative": len(CLS_NEGATIVES),
            },
        }

    def load(self) -> None:
        import numpy as np

        super().load()
        embeddings = self.encoder.text_embeddings.double().cpu().numpy()
        row = {text: i for i, text in enumerate(self.encoder.texts)}
        negatives = embeddings[[row[t] for t in CLS_NEGATIVES]]
        weights, biases = [], []
        for key in ATTRIBUTE_KEYS:
            positives = embeddings[[row[t] for t in CLS_POSITIVES[key]]]
            # Negatives first, then positives, as the authors' code stacks them (SGD's shuffle
            # and validation split depend on the order).
            x = np.concatenate([negatives, positives])
            y = np.concatenate([np.zeros(len(negatives), dtype=int), np.ones(len(positives), dtype=int)])
            for seed in self.seeds:
                classifier = sgd_classifier(seed, self.alpha).fit(x, y)
                weights.append(classifier.coef_[0])
                biases.append(classifier.intercept_[0])
        self._weights = np.stack(weights)
        self._biases = np.asarray(biases)

    def outputs(self, batch: Sequence[PILImage]) -> list[dict[str, Any]]:
        probabilities = self.probabilities(self.encoder.image_embeddings(batch).double().numpy())
        meta = self.meta
        return [
            {"scores": dict(zip(ATTRIBUTE_KEYS, row, strict=True)), "meta": meta}
            for row in probabilities.tolist()
        ]

    def probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        """(n, keys) mean over seeds of each classifier's P(attribute) for L2-normalised embeddings."""
        from scipy.special import expit

        if self._weights is None or self._biases is None:
            raise RuntimeError(f"{self.key}: load() must run first")
        logits = embeddings @ self._weights.T + self._biases
        return expit(logits).reshape(len(embeddings), len(ATTRIBUTE_KEYS), len(self.seeds)).mean(axis=2)
