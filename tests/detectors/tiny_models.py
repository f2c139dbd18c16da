"""Tiny, random-weight models saved the way real ones are, for offline detector tests.

- ``save_tiny_clip(folder)``: a CLIP with hidden size 32, two layers, 32 px images in 8 px
  patches, a tokenizer over a hand-written character vocabulary (every lower-case prompt is
  spelled letter by letter, so no word is unknown), and a 32 px image processor — written with
  ``save_pretrained`` so ``from_pretrained(folder)`` loads it like the real checkpoint.
- ``save_tiny_tokenizer(folder, letters)``: a tokenizer that only knows ``letters`` (to show that an
  incomplete vocabulary is refused).
- ``save_tiny_yolo(path)``: YOLOv8n built from its yaml (random weights), saved as a ``.pt``.

DETECT-B's tests may import these builders.
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Iterable
from pathlib import Path

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
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
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
