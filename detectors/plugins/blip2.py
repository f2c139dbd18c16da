"""BLIP-2 visual question answering as a gender detector: the paper's "BLIP-2" (appendix A)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from detectors import weights
from detectors.base import FEMALE, MALE, Detector, DetectorOptionError, DetectorOutput, DetectorUnavailable
from detectors.plugins.clip import DTYPES

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

PROMPT = "Question: does the person look like a male or a female? Answer:"
DEFAULT_WEIGHTS = weights.DEFAULT_WEIGHTS["blip2"]

MALE_WORDS = frozenset({"male", "males", "man", "men", "boy", "boys"})
FEMALE_WORDS = frozenset({"female", "females", "woman", "women", "girl", "girls", "lady", "ladies"})
NEGATIONS = frozenset({"not", "no", "neither", "nor", "nt"})  # "isn't" splits into "isn", "t"
_WORD = re.compile(r"[a-z]+")


def parse_answer(answer: str) -> DetectorOutput:
    """The verdict a BLIP-2 answer stands for (rule: docs/reference/detector-rules.md)."""
    text = answer.lower().replace("n't", " nt")
    words = set(_WORD.findall(text))
    male, female = bool(words & MALE_WORDS), bool(words & FEMALE_WORDS)
    detail = answer.strip()
    if words & NEGATIONS or male == female:
        return DetectorOutput.filtered("unparseable", detail=detail)
    return DetectorOutput(verdict=MALE if male else FEMALE, detail=detail)


class Blip2Detector(Detector):
    key: ClassVar[str] = "blip2"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "BLIP-2 (OPT-2.7b) asked whether the person looks male or female."
    option_help: ClassVar[dict[str, str]] = {
        "weights": "a local folder or cached hub id; overrides BIASLAB_BLIP2_WEIGHTS",
        "max_new_tokens": "longest answer generated (default 10)",
        "dtype": "bf16 | fp16 | fp32 (default fp16 on CUDA, fp32 elsewhere)",
    }

    def __init__(
        self,
        *,
        device: str = "cpu",
        weights: str | None = None,
        max_new_tokens: int = 10,
        dtype: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(device=device, **options)
        self.weights = weights  # overrides the environment (tests, notebooks)
        self.max_new_tokens = self.number_option("max_new_tokens", max_new_tokens, int, minimum=1)
        if dtype is not None and dtype not in DTYPES and dtype not in DTYPES.values():
            raise DetectorOptionError(f"blip2's dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        # None: float16 on CUDA, float32 elsewhere (chosen in load()).
        self.dtype_name = DTYPES.get(dtype, dtype) if dtype is not None else None
        self.processor: Any = None
        self.model: Any = None

    @property
    def version_id(self) -> str:
        """``1+Salesforce/blip2-opt-2.7b``, or ``1+<folder name>`` for local weights."""
        return (
            f"{self.version}+{weights.configured_weights(self.key, DEFAULT_WEIGHTS, override=self.weights)}"
        )

    def load(self) -> None:
        from detectors.torch_compat import ensure_torchvision
        from detectors.weights import (
            check_tokenizer_covers,
            hub_load_kwargs,
            resolve_weights,
            weights_env_var,
        )

        var = weights_env_var(self.key)
        source = resolve_weights(
            self.key,
            DEFAULT_WEIGHTS,
            override=self.weights,
            what=f"a local folder holding the model and processor files of {DEFAULT_WEIGHTS}, about 15 GB",
        )
        ensure_torchvision()
        import torch
        from transformers import Blip2ForConditionalGeneration, Blip2Processor

        dtype = getattr(torch, self.dtype_name) if self.dtype_name else None
        if dtype is None:
            dtype = torch.float16 if str(self.device).startswith("cuda") else torch.float32
        try:
            processor = Blip2Processor.from_pretrained(source, **hub_load_kwargs())
            model = Blip2ForConditionalGeneration.from_pretrained(source, dtype=dtype, **hub_load_kwargs())
        except (OSError, ValueError) as exc:
            raise DetectorUnavailable(
                f"Cannot load BLIP-2 from {source!r} ({exc}): set {var} to a local folder holding "
                "Salesforce/blip2-opt-2.7b saved with save_pretrained()."
            ) from exc
        check_tokenizer_covers(processor.tokenizer, [PROMPT], var=var)
        # Left padding keeps every prompt's last token next to the answer (decoder-only OPT).
        processor.tokenizer.padding_side = "left"
        self.processor = processor
        # transformers wraps PreTrainedModel.to with functools.wraps, whose typeshed type binds no
        # ``self``: mypy would take the device for the model.
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        self._dtype = dtype

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.ensure_loaded()
        if not batch:
            return []
        return [parse_answer(answer) for answer in self.answers(batch)]

    def answers(self, batch: Sequence[PILImage]) -> list[str]:
        """BLIP-2's raw answers to the question, one per image."""
        import torch

        images = [image.convert("RGB") for image in batch]
        inputs = self.processor(images=images, text=[PROMPT] * len(images), return_tensors="pt", padding=True)
        inputs = inputs.to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self._dtype)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1
            )
        prompt_len = inputs["input_ids"].shape[1]
        # A decoder-only language model returns prompt + answer; keep the answer only, or the
        # prompt's own "male or a female" would reach the parser.
        if out.shape[1] >= prompt_len and torch.equal(out[:, :prompt_len], inputs["input_ids"]):
            out = out[:, prompt_len:]
        return [text.strip() for text in self.processor.batch_decode(out, skip_special_tokens=True)]
