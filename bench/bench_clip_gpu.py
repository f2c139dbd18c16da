"""Benchmark: CLIP ViT-L/14 image encoding throughput on a GPU (the ~6,100 images/s an H100's peak allows).

    .venv/bin/python bench/bench_clip_gpu.py [--device cuda] [--batch-sizes 128,256,512]
        [--dtype bf16] [--compile] [--iters 20] [--weights DIR]
    .venv/bin/python bench/bench_clip_gpu.py --smoke      # CPU, tiny ViT: checks the code path only

Two figures per batch size:

- **encoder**: the vision tower + projection alone, inputs already on the device in bf16 — the
  number to compare with the bound. ViT-L/14 at 224 px costs ~162 GFLOP per image; an H100
  SXM's dense bf16 peak (~989 TFLOP/s) allows ~6,100 images/s; the goal is at least half.
- **end to end**: JPEG bytes → images on the device → embeddings. Decoding and resizing to
  224² happen in a pool of CPU threads that fill pinned uint8 batches ahead of the GPU (off the
  critical path); the GPU does uint8 → float, CLIP normalisation and the encoder. If this is far
  below the encoder figure, the CPU side (cores, decoder) is the bottleneck, not the GPU.

Weights: random ViT-L/14 (the cost does not depend on the weight values, and nothing is
downloaded), or ``--weights DIR`` for a saved CLIP. ``--smoke`` runs a tiny ViT (hidden 64,
2 layers) on the CPU with small batches so the script can be checked on a machine without a
GPU; its images/s says nothing about ViT-L/14 on a GPU and is labelled so. No database is used;
the load average is printed next to each figure.
"""

from __future__ import annotations

import argparse
import io
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from _common import H100_BOUND, VIT_L14_GFLOP, device_name, load_average, set_threads, sync, vit_l14_config

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def build_model(args: argparse.Namespace):
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import CLIPVisionModelWithProjection

    if args.weights:
        model = CLIPVisionModelWithProjection.from_pretrained(args.weights, local_files_only=True)
    else:
        torch.manual_seed(0)
        model = CLIPVisionModelWithProjection(vit_l14_config(tiny=args.smoke))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    model = model.eval().to(device=args.device, dtype=dtype)
    if args.compile:
        model = torch.compile(model)
    return model, dtype


def jpeg_corpus(n: int, size: int = 512) -> list[bytes]:
    """n distinct JPEGs (noise + gradient), encoded once up front; decoding them is the work."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        base = np.linspace(0, 255, size, dtype=np.float32)[None, :, None] * np.ones((size, 1, 3), np.float32)
        noise = rng.normal(0, 20 + i % 7, (size, size, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def decode_224(data: bytes):
    """JPEG bytes → 224x224 uint8 HWC array: draft-mode decode (DCT scaling) + bicubic resize."""
    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.draft("RGB", (224, 224))  # lets libjpeg decode at 1/2, 1/4 … scale: far less work
    return np.asarray(img.convert("RGB").resize((224, 224), Image.BICUBIC))


def producer(
    corpus: list[bytes], batch: int, n_batches: int, workers: int, out: queue.Queue, pin: bool
) -> None:
    """Fill ``out`` with pinned uint8 NHWC batches, decoded by a thread pool ahead of the consumer."""
    import numpy as np
    import torch

    with ThreadPoolExecutor(workers) as pool:
        for b in range(n_batches):
            items = [corpus[(b * batch + i) % len(corpus)] for i in range(batch)]
            arrays = list(pool.map(decode_224, items))
            tensor = torch.from_numpy(np.stack(arrays))
            out.put(tensor.pin_memory() if pin else tensor)
    out.put(None)


def encode(model, pixels_uint8_nhwc, dtype, device):
    import torch

    mean = torch.tensor(CLIP_MEAN, device=device, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=device, dtype=torch.float32).view(1, 3, 1, 1)
    x = pixels_uint8_nhwc.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
    x = ((x - mean) / std).to(dtype)
    return model(pixel_values=x).image_embeds


def bench_encoder(model, dtype, device: str, batch: int, iters: int) -> float:
    import torch

    x = torch.randn(batch, 3, 224, 224, device=device).to(dtype)
    with torch.inference_mode():
        for _ in range(2):
            model(pixel_values=x)
        sync(device)
        started = time.perf_counter()
        for _ in range(iters):
            model(pixel_values=x)
        sync(device)
    return batch * iters / (time.perf_counter() - started)


def bench_end_to_end(model, dtype, device: str, batch: int, iters: int, workers: int) -> float:
    import torch

    corpus = jpeg_corpus(min(256, batch * 2))
    q: queue.Queue = queue.Queue(maxsize=4)
    pin = device.startswith("cuda")
    thread = threading.Thread(target=producer, args=(corpus, batch, iters + 1, workers, q, pin), daemon=True)
    thread.start()
    with torch.inference_mode():
        encode(model, q.get(), dtype, device)  # warm-up batch
        sync(device)
        started, n = time.perf_counter(), 0
        while (item := q.get()) is not None:
            encode(model, item, dtype, device)
            n += item.shape[0]
        sync(device)
    thread.join()
    return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny ViT, small batches: code path only.")
    parser.add_argument("--device", default=None)
    parser.add_argument("--batch-sizes", default=None)
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (default: torch's own choice)."
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first.")
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--weights", default="", help="A saved CLIP folder instead of random ViT-L/14.")
    args = parser.parse_args()
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    batch_sizes = [int(b) for b in (args.batch_sizes or ("4,8" if args.smoke else "128,256,512")).split(",")]
    iters = args.iters or (2 if args.smoke else 20)

    import torch

    set_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("No CUDA device here: run with --smoke to check the code path on the CPU.")
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
    model, dtype = build_model(args)
    what = "tiny ViT (hidden 64, 2 layers)" if args.smoke and not args.weights else "ViT-L/14"
    print(
        f"bench_clip_gpu: {what}, {args.dtype}, compile={args.compile}, {device_name(args.device)}, "
        f"{args.workers} decode threads, {load_average()}"
    )
    if args.smoke:
        print("SMOKE MODE: checks the code path on the CPU. These images/s are NOT ViT-L/14 GPU figures.")
    for batch in batch_sizes:
        enc = bench_encoder(model, dtype, args.device, batch, iters)
        e2e = bench_end_to_end(model, dtype, args.device, batch, iters, args.workers)
        line = f"batch {batch:4d}: encoder {enc:9.1f} images/s   end to end (JPEG decode → embeddings) {e2e:9.1f} images/s"
        if not args.smoke:
            line += f"   encoder = {enc / H100_BOUND:.0%} of the ~{H100_BOUND:.0f}/s H100 bound ({enc * VIT_L14_GFLOP / 1000:.0f} TFLOP/s)"
        print(f"{line}   ({load_average()})", flush=True)


if __name__ == "__main__":
    main()
