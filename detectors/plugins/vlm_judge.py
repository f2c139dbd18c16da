"""``vlm_judge``: any image-text-to-text model on this machine answers a study's questions. Each choice's text
is scored as the assistant's answer (nothing is generated or parsed); the answer is the most likely choice.
Model, template, scoring and version: docs/reference/detector-rules.md."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from detectors.base import DetectorOptionError, DetectorOutput, DetectorUnavailable
from detectors.judges import JudgeDetector, JudgeQuestion, judge_output
from detectors.weights import configured_value, hub_cache_dir, resolve_weights, weights_env_var, weights_label

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

#: Weights key: ``BIASLAB_VLM_WEIGHTS``.
WEIGHTS_KEY = "vlm"
#: The user's turn after the image. ``{question}``: the question's text; ``{choices}``: one line
#: ``- <choice text>`` per choice. The judge then scores each choice's text as its answer.
DEFAULT_TEMPLATE = "{question}\nChoices:\n{choices}\nAnswer with one of the choices, exactly as written."
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WHAT = (
    "a local folder (or a hub id in the local Hugging Face cache) holding an image-text-to-text "
    "chat model that AutoModelForImageTextToText loads, with its processor and chat template"
)


def template_fill(template: str, question: JudgeQuestion) -> str:
    """The user's text for ``question``: ``template`` with ``{question}`` and ``{choices}``."""
    lines = "\n".join(f"- {text}" for _value, text in question.choices)
    return template.format(question=question.text, choices=lines)


def softmax(values: Sequence[float]) -> list[float]:
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = math.fsum(weights)
    return [w / total for w in weights]


def model_revision(source: str) -> str:
    """What identifies the weights of ``source`` (``resolve_weights``'s answer) in the version: a
    hub snapshot's commit (8 hex), or for a local folder a hash of its config.json and its weight
    files' names and sizes."""
    path = Path(source).expanduser()
    if not path.is_dir():
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, "config.json", cache_dir=str(hub_cache_dir()))
        if not isinstance(found, str):
            raise DetectorUnavailable(
                f"Weights {source!r} are not in the local Hugging Face cache ({hub_cache_dir()}) "
                f"and this machine does not download them: set {weights_env_var(WEIGHTS_KEY)} to {_WHAT}."
            )
        return Path(found).parent.name[:8]
    config = path / "config.json"
    if not config.is_file():
        raise DetectorUnavailable(
            f"Folder {str(path)!r} holds no config.json, so it is not a saved model: set "
            f"{weights_env_var(WEIGHTS_KEY)} to {_WHAT}."
        )
    digest = hashlib.sha256(config.read_bytes())
    for weights in sorted(p for p in path.iterdir() if p.suffix in _WEIGHT_SUFFIXES):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    return digest.hexdigest()[:8]


class VlmJudgeDetector(JudgeDetector):
    """A vision-language model answering each image's questions by the likelihood of each choice."""

    key: ClassVar[str] = "vlm_judge"
    version: ClassVar[str] = "1"
    default_template: ClassVar[str] = DEFAULT_TEMPLATE
    description: ClassVar[str] = (
        "A vision-language model (transformers) asked the study's questions; each choice scored by its log-likelihood."
    )
    option_help: ClassVar[dict[str, str]] = {
        "model": "a local folder or cached hub id of an image-text-to-text chat model; overrides BIASLAB_VLM_WEIGHTS",
        "prompt_template": "a text file: the user's message after the image, with {question} and {choices} "
        "(one '- choice' line each); default in docs/reference/detectors.md",
        "dtype": "bf16 | fp16 | fp32 (default bf16 on CUDA, fp32 elsewhere)",
        "batch_size": "questions per forward pass, each with all its choices (default 8)",
        "max_image_side": "longest image side in pixels given to the processor (default 1024; 0: as stored)",
    }

    def __init__(
        self,
        *,
        device: str = "cpu",
        model: str | None = None,
        prompt_template: str | None = None,
        dtype: str | None = None,
        batch_size: int | None = None,
        max_image_side: int | None = None,
        **options: Any,
    ) -> None:
        named = {
            "model": model,
            "prompt_template": prompt_template,
            "dtype": dtype,
            "batch_size": batch_size,
            "max_image_side": max_image_side,
        }
        # Kept in ``self.options`` as given: a Ray worker rebuilds the detector from them.
        super().__init__(device=device, **{k: v for k, v in named.items() if v is not None}, **options)
        self.model_option = str(model) if model is not None else None
        if dtype is not None and dtype not in _DTYPES:
            raise DetectorOptionError(f"vlm_judge's dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        self.dtype_name = _DTYPES[dtype] if dtype is not None else None
        self.batch_size = self.number_option(
            "batch_size", 8 if batch_size is None else batch_size, int, minimum=1
        )
        side = 1024 if max_image_side is None else max_image_side
        self.max_image_side = self.number_option("max_image_side", side, int, minimum=0)
        self.template = self._template_read(prompt_template)
        self.processor: Any = None
        self.model: Any = None

    @staticmethod
    def _template_read(path: str | None) -> str:
        if path is None:
            return DEFAULT_TEMPLATE
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DetectorOptionError(f"vlm_judge's prompt_template {path!r} cannot be read: {exc}") from None
        try:
            template_fill(text, JudgeQuestion("q", "Is it?", (("yes", "yes"), ("no", "no"))))
        except (KeyError, IndexError, ValueError) as exc:
            raise DetectorOptionError(
                f"vlm_judge's prompt_template {path!r} is not a template of {{question}} and "
                f"{{choices}} ({type(exc).__name__}: {exc}); write a literal brace as {{{{ or }}}}."
            ) from None
        return text

    @property
    def template_hash(self) -> str:
        return hashlib.sha256(self.template.encode()).hexdigest()[:8]

    @property
    def judge_version(self) -> str:
        """``1+<model>@<revision>+t<template hash>`` (docs/reference/detector-rules.md); DetectorUnavailable
        naming BIASLAB_VLM_WEIGHTS when no model is configured or found."""
        value = configured_value(WEIGHTS_KEY, override=self.model_option)
        if not value:
            raise DetectorUnavailable(
                f"vlm_judge has no model: set {weights_env_var(WEIGHTS_KEY)} (or --option model=…) to {_WHAT}."
            )
        source = resolve_weights(WEIGHTS_KEY, override=self.model_option, what=_WHAT)
        return f"{self.version}+{weights_label(value)}@{model_revision(source)}+t{self.template_hash}"

    def load(self) -> None:
        from detectors.torch_compat import ensure_torchvision
        from detectors.weights import check_tokenizer_covers, hub_load_kwargs

        var = weights_env_var(WEIGHTS_KEY)
        source = resolve_weights(WEIGHTS_KEY, override=self.model_option, what=_WHAT)
        ensure_torchvision()
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        dtype = getattr(torch, self.dtype_name) if self.dtype_name else None
        if dtype is None:
            dtype = torch.bfloat16 if str(self.device).startswith("cuda") else torch.float32
        try:
            processor = AutoProcessor.from_pretrained(source, **hub_load_kwargs())
            model = AutoModelForImageTextToText.from_pretrained(source, dtype=dtype, **hub_load_kwargs())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DetectorUnavailable(
                f"Cannot load an image-text-to-text model from {source!r} ({type(exc).__name__}: {exc}): "
                f"set {var} to {_WHAT}."
            ) from exc
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            raise DetectorUnavailable(
                f"{source!r} has no tokenizer beside its processor: set {var} to {_WHAT}."
            )
        if not (getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)):
            raise DetectorUnavailable(
                f"{source!r} has no chat template (chat_template.jinja, or chat_template in its "
                f"tokenizer or processor config), so its prompt cannot be written: set {var} to an "
                "instruction-tuned model's folder, or add its chat template."
            )
        check_tokenizer_covers(tokenizer, ["Answer with one of the choices."], var=var)
        # Right padding: a row's tokens keep the positions they have alone (batched = alone).
        tokenizer.padding_side = "right"
        self.processor = processor
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        self._dtype = dtype
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._prompts: dict[JudgeQuestion, str] = {}

    # --- scoring ------------------------------------------------------------------------------
    def prompt(self, question: JudgeQuestion) -> str:
        """The chat-templated prompt for ``question``, up to where the assistant's answer starts."""
        if question not in self._prompts:
            messages = [
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "text", "text": template_fill(self.template, question)},
                    ],
                }
            ]
            self._prompts[question] = self.processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        return self._prompts[question]

    def choice_ids(self, text: str) -> list[int]:
        """The tokens of a choice's text as the answer (no special tokens)."""
        ids = list(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"the choice {text!r} has no tokens")
        return ids

    def _fit(self, image: PILImage) -> PILImage:
        image = image.convert("RGB")
        side = self.max_image_side
        if side and max(image.size) > side:
            scale = side / max(image.size)
            size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
            image = image.resize(size)
        return image

    def _processed(self, pairs: Sequence[tuple[str, PILImage]], row_units: Sequence[int]) -> Any:
        """The processor's batch for one row per choice (``row_units``: each row's pair)."""
        import torch

        once = self.processor(
            text=[prompt for prompt, _image in pairs],
            images=[[image] for _prompt, image in pairs],
            return_tensors="pt",
            padding=True,
        )
        if all(not torch.is_tensor(v) or v.shape[0] == len(pairs) for v in once.values()):
            index = torch.tensor(row_units)
            for key, value in once.items():
                if torch.is_tensor(value):
                    once[key] = value.index_select(0, index)
            return once
        return self.processor(
            text=[pairs[unit][0] for unit in row_units],
            images=[[pairs[unit][1]] for unit in row_units],
            return_tensors="pt",
            padding=True,
        )

    def loglikelihoods(
        self, images: Sequence[PILImage], units: Sequence[tuple[int, JudgeQuestion]]
    ) -> list[list[float]]:
        """Per unit ``(image index, question)``: each choice's summed log-likelihood as the
        answer, all units in one forward pass (one row per choice)."""
        import torch

        # One row per choice: (unit, image index, prompt, choice tokens).
        rows = [
            (unit, index, self.prompt(q), self.choice_ids(text))
            for unit, (index, q) in enumerate(units)
            for _value, text in q.choices
        ]
        try:
            inputs = self._processed(
                [(self.prompt(q), images[index]) for index, q in units], [row[0] for row in rows]
            )
        except Exception as exc:  # the processor's refusal of an image (or of its size)
            sizes = ", ".join(sorted({f"{images[i].width}x{images[i].height}" for _n, i, _p, _c in rows}))
            raise ValueError(
                f"the model's processor refused the image ({sizes}): {type(exc).__name__}: {exc}"
            ) from exc
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        lengths = [int(m) for m in mask.sum(dim=1)]
        ends = [length + len(choice) for length, (_n, _i, _p, choice) in zip(lengths, rows, strict=True)]
        width = max(ends)
        pad = self.processor.tokenizer.pad_token_id or 0
        per_token = {
            key: value
            for key, value in inputs.items()
            if torch.is_tensor(value)
            and value.dim() == 2
            and value.shape == ids.shape
            and not key.startswith(("pixel", "image", "video"))
        }
        for key, value in per_token.items():
            # Choice tokens: attended (mask 1), suffix tokens (token_type_ids 1: causal, as an answer), else 0.
            fill = pad if key == "input_ids" else 0
            grown = torch.full((value.shape[0], width, *value.shape[2:]), fill, dtype=value.dtype)
            for row, (length, end, (_n, _i, _p, choice)) in enumerate(zip(lengths, ends, rows, strict=True)):
                grown[row, :length] = value[row, :length]
                if key == "input_ids":
                    grown[row, length:end] = torch.tensor(choice, dtype=value.dtype)
                elif key in ("attention_mask", "token_type_ids"):
                    grown[row, length:end] = 1
            inputs[key] = grown
        start = min(lengths) - 1
        if self._keeps_logits:
            inputs["logits_to_keep"] = torch.arange(start, width - 1)
        else:
            start = 0
        inputs = inputs.to(self.device)
        for key in ("pixel_values", "pixel_values_videos"):
            if key in inputs and torch.is_floating_point(inputs[key]):
                inputs[key] = inputs[key].to(self._dtype)
        try:
            with torch.inference_mode():
                logits = self.model(**inputs).logits
        except (RuntimeError, ValueError, IndexError) as exc:  # e.g. an image size the model cannot take
            sizes = ", ".join(sorted({f"{images[i].width}x{images[i].height}" for _n, i, _p, _c in rows}))
            raise ValueError(
                f"the model could not take the image ({sizes}): {type(exc).__name__}: {exc}"
            ) from exc
        scores: list[list[float]] = [[] for _ in units]
        for row, (length, end, (unit, _i, _p, choice)) in enumerate(zip(lengths, ends, rows, strict=True)):
            window = logits[row, length - 1 - start : end - 1 - start].float().log_softmax(dim=-1)
            target = torch.tensor(choice, device=window.device).unsqueeze(1)
            scores[unit].append(float(window.gather(1, target).sum()))
        return scores

    def predict(
        self, batch: Sequence[PILImage], questions: Sequence[Sequence[JudgeQuestion]] | None = None
    ) -> list[DetectorOutput]:
        self.ensure_loaded()
        asked = self.questions_of_batch(len(batch), questions)
        images = [self._fit(image) for image in batch]
        units = [(index, q) for index, questions_of in enumerate(asked) for q in questions_of]
        scores: list[list[float]] = []
        for at in range(0, len(units), self.batch_size):
            scores += self.loglikelihoods(images, units[at : at + self.batch_size])
        loglik: list[dict[str, dict[str, float]]] = [{} for _ in batch]
        for (index, q), values in zip(units, scores, strict=True):
            loglik[index][q.key] = {value: ll for (value, _t), ll in zip(q.choices, values, strict=True)}
        kind = self.declared_kind
        outputs = []
        for by_question in loglik:
            probabilities = {
                key: dict(zip(lls, softmax(list(lls.values())), strict=True))
                for key, lls in by_question.items()
            }
            outputs.append(judge_output(kind, probabilities, detail={"loglik": by_question}))
        return outputs
