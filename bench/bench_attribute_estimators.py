"""Benchmark: images/s of the GEP attribute estimators clip_attr (C), clip_attr_calibrated (CC)
and clip_attr_cls (CLS), on the CPU and, when there is one, on CUDA.

    .venv/bin/python bench/bench_attribute_estimators.py [--images 8] [--size 512]
        [--batch-size 8] [--seeds 10] [--devices cpu,cuda] [--dtype bf16] [--threads 0]
        [--weights DIR | --tiny] [--cache DIR]

Weights, in order of preference:

- ``--weights DIR``: a saved CLIP (what ``BIASLAB_CLIP_WEIGHTS`` would point to);
- default: a **random-weight CLIP the size of ViT-L/14** (vision 24 x 1024 at 224 px / patch 14,
  text 12 x 768, projection 768) — the cost of a forward pass does not depend on the weight
  values, and nothing is downloaded. It is built once and saved in fp16 under ``--cache``
  (default ``$TMPDIR/biaslab-bench-clip-l14-random``, ~0.9 GB), then loaded by the detectors
  exactly as real weights are. Its tokenizer spells the estimators' words as whole tokens
  (``word_tokenizer``): ~16 tokens per CLS training text against ~12 with CLIP's BPE, so the
  **load** figure of ``clip_attr_cls`` (768 training texts through the text tower, then
  15 x seeds SGD fits) is slightly pessimistic; the images/s figures do not depend on it;
- ``--tiny``: the tests' tiny CLIP (hidden 32, 32 px images) — checks the code path in seconds;
  its images/s says nothing about ViT-L/14.

Per device and estimator the detector is built and loaded as ``run_detectors`` would (load time
printed: weights, text embeddings, and for CLS the classifier training), then predicts one image
to warm up and ``--images`` real photos shipped with scikit-image / matplotlib (resized to
``--size``²) in batches of ``--batch-size``. The three share CLIP's image encoder; what differs
is a dot product (C, CC) or 15 x seeds logistic classifiers (CLS) per image. No database is used;
the load average is printed next to each figure (this machine is shared: figures are noisy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import device_name, load_average, set_threads, sync, vit_l14_config

ESTIMATORS = ("clip_attr", "clip_attr_calibrated", "clip_attr_cls")


def sample_photos(n: int, size: int) -> list:
    """Real photos that ship with installed packages, resized to size x size, cycled to n."""
    import matplotlib.cbook
    from PIL import Image
    from skimage import data

    photos = [Image.fromarray(a).convert("RGB") for a in (data.astronaut(), data.camera(), data.coffee())]
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photos.append(Image.open(handle).convert("RGB"))
    photos = [p.resize((size, size)) for p in photos]
    return [photos[i % len(photos)] for i in range(n)]


def word_tokenizer(folder: Path, texts: list[str]) -> Any:
    """A CLIPTokenizer that spells each word of ``texts`` as one token, as CLIP's BPE does for
    these common English words (a character-level one would make the texts ~4x longer).

    Its merges join a word's letters left to right; every intermediate piece is in the
    vocabulary, so whatever order BPE merges in, no token is unknown.
    """
    import json
    import re

    from transformers import CLIPTokenizer

    from tests.detectors.tiny_models import CHARACTERS, SPECIALS

    vocab = dict.fromkeys([*SPECIALS, *CHARACTERS, *(f"{c}</w>" for c in CHARACTERS)])
    merges: dict[str, None] = {}
    for word in sorted({w for text in texts for w in re.findall(r"[a-z]+", text.lower())}):
        piece = word[0]
        for i, char in enumerate(word[1:], start=2):
            char = f"{char}</w>" if i == len(word) else char
            merges[f"{piece} {char}"] = None
            piece += char
            vocab[piece] = None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))


def random_clip_l14(folder: Path) -> Path:
    """A random CLIP with ViT-L/14's shapes and a word-level tokenizer, saved once into ``folder``."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTextConfig

    from detectors.plugins.clip_attributes import CLS_TEXTS, SIMILARITY_TEXTS
    from tests.detectors.tiny_models import token_ids, tower

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = word_tokenizer(folder / "_vocab", [*SIMILARITY_TEXTS, *CLS_TEXTS])
    text = CLIPTextConfig(  # openai/clip-vit-large-patch14's text tower
        vocab_size=49408, max_position_embeddings=77, **tower(768, 3072, 12, 12), **token_ids(tokenizer)
    )
    config = CLIPConfig(
        text_config=text.to_dict(), vision_config=vit_l14_config().to_dict(), projection_dim=768
    )
    torch.manual_seed(0)
    model = CLIPModel(config).eval().half()  # fp16 on disk: half the size; loaded back as fp32
    processor = CLIPProcessor(image_processor=CLIPImageProcessor(), tokenizer=tokenizer)  # 224 px
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    shutil.rmtree(folder / "_vocab")  # the hand-written files; the saved tokenizer has them
    return folder


def tiny_clip(folder: Path) -> Path:
    from tests.detectors.tiny_models import save_tiny_clip

    return folder if (folder / "config.json").is_file() else save_tiny_clip(folder)


def bench(key: str, device: str, images: list, args: argparse.Namespace) -> str:
    from detectors import registry

    options = {"batch_size": args.batch_size}
    if device.startswith("cuda"):
        options["dtype"] = args.dtype
    if key == "clip_attr_cls":
        options["seeds"] = args.seeds
    detector = registry.get(key, device=device, **options)
    started = time.perf_counter()
    detector.ensure_loaded()
    sync(device)
    load_s = time.perf_counter() - started
    detector.predict(images[:1])  # warm-up (allocations, lazy imports, cuDNN autotuning)
    sync(device)
    started = time.perf_counter()
    outputs = []
    for start in range(0, len(images), args.batch_size):
        outputs += detector.predict(images[start : start + args.batch_size])
    sync(device)
    seconds = time.perf_counter() - started
    assert len(outputs) == len(images)
    tie = outputs[0].as_output()["scores"]["tie"]
    return (
        f"{key:<21} {device:<6} {len(images) / seconds:9.2f} images/s ({seconds / len(images) * 1000:8.1f} "
        f"ms/image)  load {load_s:6.1f} s  [first image: tie {tie:+.4f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10, help="clip_attr_cls's ensemble size (default 10).")
    parser.add_argument(
        "--devices", default="", help="Comma-separated (default: cpu, and cuda when available)."
    )
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="On CUDA only.")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's).")
    parser.add_argument("--only", default="", help="Comma-separated estimator keys (default: all three).")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--weights", default="", help="A saved CLIP folder instead of random ViT-L/14.")
    which.add_argument("--tiny", action="store_true", help="The tests' tiny CLIP: code path only.")
    parser.add_argument("--cache", default="", help="Where the random models are saved (reused).")
    args = parser.parse_args()

    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch

    set_threads(args.threads)
    cache = Path(args.cache or tempfile.gettempdir())
    if args.weights:
        weights, what = Path(args.weights), f"saved CLIP {args.weights}"
    elif args.tiny:
        weights, what = tiny_clip(cache / "biaslab-bench-clip-tiny"), "TINY CLIP (code path only)"
    else:
        started = time.perf_counter()
        weights = random_clip_l14(cache / "biaslab-bench-clip-l14-random")
        what = f"random ViT-L/14-sized CLIP (ready in {time.perf_counter() - started:.0f} s)"
    os.environ["BIASLAB_CLIP_WEIGHTS"] = str(weights)
    devices = [d for d in args.devices.split(",") if d] or ["cpu"] + (
        ["cuda"] if torch.cuda.is_available() else []
    )
    keys = [k for k in args.only.split(",") if k] or list(ESTIMATORS)
    images = sample_photos(args.images, args.size)
    print(
        f"bench_attribute_estimators: {what}; {args.images} photos at {args.size}², batch {args.batch_size}, "
        f"CLS {args.seeds} seeds; {os.cpu_count()} CPU(s), torch {torch.__version__}, {load_average()}"
    )
    if args.tiny:
        print("TINY MODE: checks the code path. These images/s are NOT ViT-L/14 figures.")
    for device in devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"{device}: no CUDA device here, skipped")
            continue
        print(f"-- {device_name(device)}" + (f", {args.dtype}" if device.startswith("cuda") else ", fp32"))
        for key in keys:
            print(f"{bench(key, device, images, args)}   ({load_average()})", flush=True)


if __name__ == "__main__":
    main()
