"""Tiny, random-weight models saved the way real ones are, for offline detector tests.

- ``save_tiny_clip(folder)``: a CLIP with hidden size 32, two layers, 32 px images in 8 px
  patches, a tokenizer over a hand-written character vocabulary (every lower-case prompt is
  spelled letter by letter, so no word is unknown), and a 32 px image processor — written with
  ``save_pretrained`` so ``from_pretrained(folder)`` loads it like the real checkpoint.
- ``save_tiny_tokenizer(folder, letters)``: a tokenizer that only knows ``letters`` (to show that an
  incomplete vocabulary is refused).
- ``save_tiny_yolo(path)``: YOLOv8n built from its yaml (random weights), saved as a ``.pt``.
- ``save_tiny_vlm(folder)``: a random tiny LLaVA with a character-level tokenizer and a chat
  template, loaded by ``AutoProcessor`` + ``AutoModelForImageTextToText`` (``vlm_judge``).
- ``save_tiny_qwen2_vl(folder)``: the same for a tiny Qwen2-VL (images packed as patches).

DETECT-B's tests may import these builders.
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SPECIALS = ("<|startoftext|>", "<|endoftext|>")
CHARACTERS = tuple(string.ascii_lowercase) + tuple(".,'-?!:")


def _write_vocab(folder: Path, tokens: Iterable[str]) -> None:
    vocab: dict[str, int] = {}
    for token in (*SPECIALS, *tokens):
        vocab.setdefault(token, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")


def tiny_tokenizer(folder: Path, tokens: Iterable[str] | None = None):
    """A CLIPTokenizer over ``tokens`` (default: every character, alone and word-final)."""
    from transformers import CLIPTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    if tokens is None:
        tokens = [*CHARACTERS, *(f"{c}</w>" for c in CHARACTERS)]
    _write_vocab(folder, tokens)
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))


def save_tiny_tokenizer(folder: Path, letters: str) -> Path:
    """Save a tokenizer that can only spell words made of ``letters`` into ``folder``."""
    tokenizer = tiny_tokenizer(folder / "_vocab", [*letters, *(f"{c}</w>" for c in letters)])
    tokenizer.save_pretrained(folder)
    return folder


def tower(hidden: int, intermediate: int, layers: int, heads: int, **more: Any) -> dict[str, Any]:
    """A transformer config's sizes (width, feed-forward width, depth, heads), plus ``more``."""
    return {
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        **more,
    }


def token_ids(tokenizer: Any) -> dict[str, int]:
    """A text config's begin, end and padding token ids, as ``tokenizer`` numbers them."""
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def save_tiny_clip(folder: Path, *, seed: int = 0) -> Path:
    """Build a random tiny CLIP with its tokenizer and processor and save it into ``folder``."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPProcessor,
        CLIPTextConfig,
        CLIPVisionConfig,
    )

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer(folder / "_vocab")
    text = CLIPTextConfig(
        vocab_size=len(tokenizer), max_position_embeddings=77, **tower(32, 64, 2, 2), **token_ids(tokenizer)
    )
    vision = CLIPVisionConfig(image_size=32, patch_size=8, **tower(32, 64, 2, 2))
    config = CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    shutil.rmtree(folder / "_vocab")  # the hand-written files; the saved tokenizer has them
    return folder


def save_tiny_yolo(path: Path) -> Path:
    """YOLOv8n from its yaml (random weights, built offline), saved to ``path`` (a ``.pt``)."""
    from detectors.plugins.persons import prepare_ultralytics_env

    prepare_ultralytics_env()
    from ultralytics import YOLO

    path.parent.mkdir(parents=True, exist_ok=True)
    model = YOLO("yolov8n.yaml")
    model.save(str(path))
    return path


#: The tiny VLM's chat template: ``<|user|>`` + the image + the text + ``<|end|><|assistant|>``.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_VLM_CHARACTERS = tuple(string.ascii_letters + string.digits + " .,'?!:-\n{}()")


def save_tiny_vlm(folder: Path, *, seed: int = 0, chat_template: bool = True) -> Path:
    """A random tiny LLaVA (a CLIP vision tower of 16 px images in 8 px patches, a one-layer
    Llama of hidden size 16) with a processor whose tokenizer spells every character alone, so a
    choice like "Yes" is three tokens; saved with ``save_pretrained`` so that
    ``AutoProcessor`` + ``AutoModelForImageTextToText`` load it like a real checkpoint.
    ``chat_template=False``: the same without its chat template."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<image>", "<|user|>", "<|assistant|>", "<|end|>"]
    vocab = {token: n for n, token in enumerate([*specials, *_VLM_CHARACTERS])}
    spelled = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    spelled.pre_tokenizer = pre_tokenizers.Split("", "isolated")  # one token per character
    spelled.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=spelled, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": specials[4:]})
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        num_key_value_heads=2,
        max_position_embeddings=512,
        **tower(16, 32, 1, 2),
        **token_ids(tokenizer),
    )
    vision = CLIPVisionConfig(image_size=16, patch_size=8, **tower(16, 32, 1, 2))
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}),
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=TINY_CHAT_TEMPLATE if chat_template else None,
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


_QWEN_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def save_tiny_qwen2_vl(folder: Path, *, seed: int = 0) -> Path:
    """A random tiny Qwen2-VL (its processor packs every image's patches into one tensor, and
    its positions are 3-D), with the same character-level tokenizer and a chat template."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    specials = ["<pad>", "<s>", "</s>", "<unk>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
    specials += ["<|video_pad|>", "<|user|>", "<|assistant|>", "<|end|>"]
    spelled = Tokenizer(
        models.WordLevel({t: n for n, t in enumerate([*specials, *_VLM_CHARACTERS])}, unk_token="<unk>")
    )
    spelled.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    spelled.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=spelled, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": specials[4:]})
    config = Qwen2VLConfig(
        text_config=tower(
            16,
            32,
            1,
            2,
            vocab_size=len(tokenizer),
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
            **token_ids(tokenizer),
        ),
        vision_config={
            "depth": 1,
            "embed_dim": 16,
            "hidden_size": 16,
            "num_heads": 2,
            "patch_size": 4,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    sizes = {"patch_size": 4, "merge_size": 2, "temporal_patch_size": 2}
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=16 * 16, max_pixels=32 * 32, **sizes),
        video_processor=Qwen2VLVideoProcessor(**sizes),
        tokenizer=tokenizer,
        chat_template=_QWEN_CHAT_TEMPLATE,
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
