"""BLIP-2 visual question answering as a gender detector — the paper's "BLIP-2" (appendix A).

Salesforce/blip2-opt-2.7b (or ``BIASLAB_BLIP2_WEIGHTS``: a local folder or a cached hub id) is
asked, for every image, the question of Cho et al. (2023) that the paper reuses::

    Question: does the person look like a male or a female? Answer:

and answers with greedy decoding (at most ``max_new_tokens`` tokens). The answer is free text;
``parse_answer`` turns it into a verdict by this rule (tested exhaustively):

  * lower-case the answer and split it into words (runs of letters, so "female" never matches
    "male" and "woman" never matches "man");
  * a word in MALE_WORDS (male, man, boy and their plurals) votes male; a word in FEMALE_WORDS
    (female, woman, girl, lady and plurals) votes female;
  * exactly one side voted → that verdict;
  * both sides voted ("a man and a woman"), neither did ("a person", "yes", ""), or the answer
    holds a negation word (not, no, neither, nor, n't — "not a male" must not read as male)
    → filtered ``unparseable``.

The raw answer is always kept in ``detail`` so researchers can audit the parser.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.base import FEMALE, MALE, Detector, DetectorOutput, DetectorUnavailable

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

PROMPT = "Question: does the person look like a male or a female? Answer:"
DEFAULT_WEIGHTS = "Salesforce/blip2-opt-2.7b"

MALE_WORDS = frozenset({"male", "males", "man", "men", "boy", "boys"})
FEMALE_WORDS = frozenset({"female", "females", "woman", "women", "girl", "girls", "lady", "ladies"})
NEGATIONS = frozenset({"not", "no", "neither", "nor", "nt"})  # "isn't" splits into "isn", "t"
_WORD = re.compile(r"[a-z]+")


def weights_label(value: str) -> str:
    """A hub id as it is; a local folder or file by its name alone."""
    path = Path(value).expanduser()
    return path.name if path.exists() or value.startswith(("/", ".", "~")) else value


def parse_answer(answer: str) -> DetectorOutput:
    """The verdict a BLIP-2 answer stands for (rule in the module docstring)."""
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
        self.max_new_tokens = max_new_tokens
        self.dtype_name = dtype  # default: float16 on CUDA, float32 elsewhere
        self.processor: Any = None
        self.model: Any = None

    @property
    def version_id(self) -> str:
        """``1+Salesforce/blip2-opt-2.7b``, or ``1+<folder name>`` for local weights.

        Known before ``load()`` (run_detectors needs it first) and the same on every machine:
        shards on different GPU hosts mount the weights at different paths, so only the folder's
        name enters the version.
        """
        return f"{self.version}+{weights_label(self._configured_weights())}"

    def _configured_weights(self) -> str:
        from detectors.weights import weights_env_var

        return self.weights or os.environ.get(weights_env_var(self.key), "").strip() or DEFAULT_WEIGHTS

    def load(self) -> None:
        from detectors.torch_compat import ensure_torchvision
        from detectors.weights import (
            check_tokenizer_covers,
            hub_load_kwargs,
            resolve_weights,
            weights_env_var,
        )

        var = weights_env_var(self.key)
        source = resolve_weights(self.key, self.weights or DEFAULT_WEIGHTS)
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
        self.model = model.to(self.device).eval()
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
