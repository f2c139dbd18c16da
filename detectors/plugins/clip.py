"""The three CLIP detectors of the paper (appendix A), sharing one loader and encoder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from detectors import weights
from detectors.base import FEMALE, MALE, Detector, DetectorOutput, DetectorUnavailable
from detectors.plugins.faces import FACE_GATE_OPTIONS, FaceGatedDetector
from detectors.weights import check_tokenizer_covers, hub_load_kwargs, resolve_weights, weights_env_var

if TYPE_CHECKING:
    import torch
    from PIL.Image import Image as PILImage

WEIGHTS_KEY = "clip"
MALE_TEXT = "a photo of a male"
FEMALE_TEXT = "a photo of a female"
GENDER_TEXTS: tuple[str, str] = (MALE_TEXT, FEMALE_TEXT)

PERSON_TEXT = "a photo of a person"
OBJECT_TEXT = "a photo of an object"
MAN_TEXT = "A photo of a person who looks like a man"
WOMAN_TEXT = "A photo of a person who looks like a woman"
UNCERTAIN_TEXT = "A photo of a person with an uncertain gender"

#: What BIASLAB_CLIP_WEIGHTS should point to, for the messages of a failed load.
WEIGHTS_WHAT = "a local folder holding the CLIPModel and CLIPProcessor files of openai/clip-vit-large-patch14"

PROB_THRESHOLD = 0.9  # clip_prob: winning probability below this → low_confidence

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

#: The options of every detector built on ClipEncoder (``Detector.option_help``).
CLIP_OPTIONS: dict[str, str] = {
    "batch_size": "images per CLIP forward pass (default 32)",
    "dtype": "bf16 (default) | fp16 | fp32 on CUDA; the CPU always runs fp32",
}


@dataclass
class ClipSimilarities:
    """Per-image similarities to every text of an encoder, and the matching logits."""

    texts: tuple[str, ...]
    cosine: torch.Tensor  # (n_images, n_texts), float32 on CPU
    logit_scale: float

    def softmax(self, columns: Sequence[str]) -> torch.Tensor:
        """Probabilities over ``columns`` only (the texts a decision compares)."""
        index = [self.texts.index(text) for text in columns]
        return (self.cosine[:, index] * self.logit_scale).softmax(dim=-1)

    def column(self, text: str) -> torch.Tensor:
        return self.cosine[:, self.texts.index(text)]


class ClipEncoder:
    """Loads CLIP once, embeds a fixed set of texts once, and scores batches of images."""

    def __init__(self, texts: Sequence[str], *, device: str = "cpu", dtype: str = "", batch_size: int = 32):
        self.texts = tuple(texts)
        self.device = device
        self.dtype_name = _dtype_name(device, dtype)
        self.batch_size = max(1, int(batch_size))
        self.weights = ""
        self._model: Any = None
        self._image_processor: Any = None
        self._text_embeddings: torch.Tensor | None = None
        self._logit_scale = 1.0

    def load(self) -> None:
        """Resolve and load weights; raise DetectorUnavailable naming BIASLAB_CLIP_WEIGHTS."""
        var = weights_env_var(WEIGHTS_KEY)
        self.weights = resolve_weights(WEIGHTS_KEY, what=WEIGHTS_WHAT)
        from detectors.torch_compat import ensure_torchvision

        ensure_torchvision()
        import torch
        from transformers import CLIPModel, CLIPProcessor

        try:
            processor = CLIPProcessor.from_pretrained(self.weights, **hub_load_kwargs())
            model = CLIPModel.from_pretrained(
                self.weights, dtype=getattr(torch, self.dtype_name), **hub_load_kwargs()
            )
        except (OSError, ValueError, KeyError) as error:
            raise DetectorUnavailable(
                f"Could not load CLIP from {self.weights!r} ({error}); set {var} to a local folder "
                "holding a saved CLIPModel with its processor."
            ) from error
        check_tokenizer_covers(processor.tokenizer, self.texts, var=var)
        # transformers wraps PreTrainedModel.to with functools.wraps, whose typeshed type binds no
        # ``self``: mypy would take the device for the model.
        self._model = model.to(self.device).eval()  # type: ignore[arg-type]
        self._image_processor = processor.image_processor
        self._logit_scale = float(model.logit_scale.detach().float().exp())
        with torch.inference_mode():
            tokens = processor.tokenizer(list(self.texts), padding=True, return_tensors="pt")
            features = _features(self._model.get_text_features(**tokens.to(self.device)))
            self._text_embeddings = _normalised(features)

    def similarities(self, images: Sequence[PILImage]) -> ClipSimilarities:
        """Cosine similarity of each image to each text, images encoded ``batch_size`` at a time."""
        texts = self.text_embeddings
        cosine = self._batched(images, lambda pixels: self.embeddings_of_pixels(pixels) @ texts.T, len(texts))
        return ClipSimilarities(self.texts, cosine, self._logit_scale)

    def image_embeddings(self, images: Sequence[PILImage]) -> torch.Tensor:
        """(n, dim) L2-normalised image embeddings, float32 on the CPU, ``batch_size`` at a time."""
        return self._batched(images, self.embeddings_of_pixels, self.text_embeddings.shape[1])

    def _batched(
        self, images: Sequence[PILImage], encode: Callable[[torch.Tensor], torch.Tensor], width: int
    ) -> torch.Tensor:
        """``encode`` of the pre-processed ``images``, ``batch_size`` at a time, as one (n, width) CPU tensor."""
        import torch

        rows = [torch.empty((0, width))]
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                rows.append(encode(self.preprocess(images[start : start + self.batch_size])).cpu())
        return torch.cat(rows)

    @property
    def text_embeddings(self) -> torch.Tensor:
        """(n_texts, dim) L2-normalised embeddings of ``texts`` in float32 on the encoder's device,
        computed once by ``load()``."""
        self._require_loaded()
        return self._text_embeddings  # type: ignore[return-value]

    def preprocess(self, images: Sequence[PILImage]) -> torch.Tensor:
        """CLIP's own pre-processing (resize, centre crop, normalise) on the CPU: (n, 3, H, W)."""
        self._require_loaded()
        chunk = [image.convert("RGB") for image in images]
        return self._image_processor(images=chunk, return_tensors="pt")["pixel_values"]

    def embeddings_of_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """(n, dim) L2-normalised float32 image embeddings of pre-processed pixels, on the device."""
        import torch

        self._require_loaded()
        with torch.inference_mode():
            pixels = pixels.to(self.device, dtype=self._model.dtype, non_blocking=True)
            return _normalised(_features(self._model.get_image_features(pixel_values=pixels)))

    def _require_loaded(self) -> None:
        if self._model is None or self._text_embeddings is None:
            raise RuntimeError("ClipEncoder.load() must run first")


def _features(output: Any) -> torch.Tensor:
    # transformers 5 returns a model output whose pooler_output is the projected embedding.
    return output if hasattr(output, "shape") else output.pooler_output


def _normalised(features: torch.Tensor) -> torch.Tensor:
    # In float32 even when the model runs in bf16/fp16: clip_prob's 0.9 threshold and the
    # person/object comparison hinge on small differences that half precision would blur.
    features = features.float()
    return features / features.norm(dim=-1, keepdim=True)


def _dtype_name(device: str, requested: str) -> str:
    if not str(device).startswith("cuda"):
        return "float32"  # half precision on CPU is slower and less exact
    if requested and requested not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {requested!r}")
    return DTYPES[requested or "bf16"]


def clip_encoder(detector: Detector, texts: Sequence[str]) -> ClipEncoder:
    """An encoder of ``texts`` set up by the detector's ``CLIP_OPTIONS``."""
    options = detector.options
    return ClipEncoder(
        texts,
        device=detector.device,
        dtype=str(options.get("dtype", "")),
        batch_size=detector.number_option("batch_size", options.get("batch_size", 32), int, minimum=1),
    )


def gender_scores(sims: ClipSimilarities, row: int) -> tuple[str, dict[str, float]]:
    """The male-vs-female decision every CLIP detector shares: higher similarity wins."""
    probs = sims.softmax(GENDER_TEXTS)[row]
    sim_male = float(sims.column(MALE_TEXT)[row])
    sim_female = float(sims.column(FEMALE_TEXT)[row])
    scores = {
        "sim_male": round(sim_male, 6),
        "sim_female": round(sim_female, 6),
        "p_male": round(float(probs[0]), 6),
        "p_female": round(float(probs[1]), 6),
    }
    return (MALE if sim_male >= sim_female else FEMALE), scores


class ClipDetectorBase(Detector):
    """Shared plumbing: one ClipEncoder over ``TEXTS``; subclasses implement ``decide``."""

    TEXTS: ClassVar[tuple[str, ...]] = GENDER_TEXTS
    option_help: ClassVar[dict[str, str]] = CLIP_OPTIONS

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.encoder = clip_encoder(self, self.TEXTS)

    @property
    def version_id(self) -> str:
        # The weights as configured, not as resolved: the id must not change once loaded.
        return f"{self.version}+{weights.configured_weights(WEIGHTS_KEY)}"

    def load(self) -> None:
        self.encoder.load()

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        if not batch:
            return []
        sims = self.encoder.similarities(batch)
        return [self.decide(sims, row) for row in range(len(batch))]

    def decide(self, sims: ClipSimilarities, row: int) -> DetectorOutput:
        raise NotImplementedError


class ClipDetector(ClipDetectorBase):
    key = "clip"
    version = "1"
    description = "CLIP ViT-L/14: 'a photo of a male' vs 'a photo of a female', never filters"

    def decide(self, sims: ClipSimilarities, row: int) -> DetectorOutput:
        verdict, scores = gender_scores(sims, row)
        return DetectorOutput(verdict=verdict, scores=scores)


class ClipProbDetector(FaceGatedDetector, ClipDetectorBase):
    key = "clip_prob"
    version = "1"
    description = "dlib face gate, then CLIP; filtered when the winning probability is below 0.9"
    option_help = {
        **CLIP_OPTIONS,
        **FACE_GATE_OPTIONS,
        "threshold": f"winning probability below which an image is filtered low_confidence (default {PROB_THRESHOLD})",
    }

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.threshold = self.number_option("threshold", options.get("threshold", PROB_THRESHOLD))

    @property
    def version_id(self) -> str:
        return f"{super().version_id}+{self.gate.version_id}+p{self.threshold:g}"

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        n_faces = [len(self.gate.detect(image)) for image in batch]
        # Only images with a face go through CLIP, still as one batch.
        with_face = [i for i, n in enumerate(n_faces) if n]
        sims = self.encoder.similarities([batch[i] for i in with_face]) if with_face else None
        outputs = [DetectorOutput.filtered("no_face", {"n_faces": 0.0}) for _ in batch]
        for row, i in enumerate(with_face):
            outputs[i] = self.decide(sims, row, n_faces=n_faces[i])  # type: ignore[arg-type]
        return outputs

    def decide(self, sims: ClipSimilarities, row: int, *, n_faces: int = 1) -> DetectorOutput:
        verdict, scores = gender_scores(sims, row)
        scores["n_faces"] = float(n_faces)
        if max(scores["p_male"], scores["p_female"]) < self.threshold:
            return DetectorOutput.filtered("low_confidence", scores)
        return DetectorOutput(verdict=verdict, scores=scores)


class ClipUncertainDetector(ClipDetectorBase):
    key = "clip_uncertain"
    version = "1"
    description = "CLIP person-vs-object filter, then man / woman / uncertain gender"

    TEXTS = (PERSON_TEXT, OBJECT_TEXT, MAN_TEXT, WOMAN_TEXT, UNCERTAIN_TEXT)
    CLASSES: ClassVar[tuple[str, str, str]] = (MALE, FEMALE, "uncertain")

    def decide(self, sims: ClipSimilarities, row: int) -> DetectorOutput:
        scores = {
            "sim_person": float(sims.column(PERSON_TEXT)[row]),
            "sim_object": float(sims.column(OBJECT_TEXT)[row]),
            "sim_man": float(sims.column(MAN_TEXT)[row]),
            "sim_woman": float(sims.column(WOMAN_TEXT)[row]),
            "sim_uncertain": float(sims.column(UNCERTAIN_TEXT)[row]),
        }
        probs = sims.softmax((MAN_TEXT, WOMAN_TEXT, UNCERTAIN_TEXT))[row]
        scores.update(p_male=float(probs[0]), p_female=float(probs[1]), p_uncertain=float(probs[2]))
        is_object = scores["sim_person"] < scores["sim_object"]  # compared before rounding
        scores = {name: round(value, 6) for name, value in scores.items()}
        if is_object:
            return DetectorOutput.filtered("not_a_person", scores)
        winner = self.CLASSES[int(probs.argmax())]
        if winner == "uncertain":
            return DetectorOutput.filtered("uncertain", scores)
        return DetectorOutput(verdict=winner, scores=scores)
