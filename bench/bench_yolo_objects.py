"""Benchmark: images/s of the ``yolo_objects`` detector, CPU or GPU.

    .venv/bin/python bench/bench_yolo_objects.py [--device cpu|cuda] [--images 32] [--size 1024]
        [--batch-sizes 1,8,16] [--image-size 640] [--confidence 0.25] [--weights FILE] [--threads 0]

What is timed is ``YoloObjectsDetector.predict`` as ``run_detectors`` calls it: PIL images of
``--size``² pixels (real photos shipped in scikit-image / matplotlib, resized like a generated
image) → ultralytics' letterbox to ``--image-size`` → YOLOv8n → NMS → clipped boxes with COCO
names, validated as the ``objects`` kind. File reading and the database are not in it.

Weights: YOLOv8n built from its yaml with random weights and COCO class names (nothing is
downloaded; the network costs the same whatever the weight values), or ``--weights FILE`` for a
real checkpoint. With random weights almost no box passes the default 0.25 threshold, so NMS has
little to do; a real checkpoint on busy images spends a little more there. ``--device cuda``
(default when a GPU is visible) runs fp16, as the detector does on CUDA. One warm-up batch is
run first; each batch size is timed over all ``--images``. The load average is printed beside
each figure (the CPU machines are shared).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import device_name, load_average, set_threads, sync

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def sample_photos(n: int, size: int) -> list:
    """Real photos that ship with installed packages, resized to size x size, cycled to n."""
    import matplotlib.cbook
    from PIL import Image
    from skimage import data

    photos = [Image.fromarray(a).convert("RGB") for a in (data.astronaut(), data.chelsea(), data.coffee())]
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photos.append(Image.open(handle).convert("RGB"))
    photos = [p.resize((size, size)) for p in photos]
    return [photos[i % len(photos)] for i in range(n)]


def random_coco_yolo(folder: Path) -> Path:
    """YOLOv8n from its yaml (random weights) with the 80 COCO names, saved as a .pt."""
    from detectors.plugins.persons import prepare_ultralytics_env

    prepare_ultralytics_env()
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from ultralytics import YOLO

    from metrics.coco_names import COCO_CLASS_NAMES

    torch.manual_seed(0)
    model = YOLO("yolov8n.yaml")
    model.model.names = dict(enumerate(COCO_CLASS_NAMES))
    path = folder / "yolov8n-random-coco.pt"
    model.save(str(path))
    return path


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--images", type=int, default=0, help="Images per timing (default 32 CPU, 512 GPU).")
    parser.add_argument("--size", type=int, default=1024, help="Side of the input images (default 1024).")
    parser.add_argument("--batch-sizes", default="", help="Default 1,8,16 on CPU, 1,16,64 on GPU.")
    parser.add_argument("--image-size", type=int, default=640, help="YOLO inference size (default 640).")
    parser.add_argument("--confidence", type=float, default=0.25)
    parser.add_argument("--weights", default="", help="A real YOLO checkpoint (default: random yolov8n).")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's choice).")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    n_images = args.images or (512 if gpu else 32)
    batch_sizes = [int(b) for b in (args.batch_sizes or ("1,16,64" if gpu else "1,8,16")).split(",")]
    set_threads(args.threads)

    import django

    django.setup()
    from detectors import registry

    with tempfile.TemporaryDirectory(prefix="bench-yolo-") as folder:
        weights = args.weights or str(random_coco_yolo(Path(folder)))
        os.environ["BIASLAB_YOLO_WEIGHTS"] = weights
        images = sample_photos(n_images, args.size)
        print(
            f"yolo_objects on {device_name(args.device)} ({args.device}), weights "
            f"{'random yolov8n' if not args.weights else weights}, {n_images} images of "
            f"{args.size}² px, inference {args.image_size} px, confidence {args.confidence}, "
            f"torch threads {torch.get_num_threads()}"
        )
        for batch_size in batch_sizes:
            detector = registry.get(
                "yolo_objects",
                device=args.device,
                confidence=args.confidence,
                image_size=args.image_size,
                batch_size=batch_size,
            )
            started = time.perf_counter()
            detector.ensure_loaded()
            load_s = time.perf_counter() - started
            detector.predict(images[:batch_size])  # warm-up: predictor setup, first allocations
            sync(args.device)
            started = time.perf_counter()
            outputs = detector.predict(images)
            sync(args.device)
            seconds = time.perf_counter() - started
            found = sum(len(o.as_output()["objects"]) for o in outputs)
            print(
                f"  batch {batch_size:>3}: {n_images / seconds:8.1f} images/s "
                f"({seconds / n_images * 1000:7.1f} ms/image; load {load_s:.1f} s; "
                f"{found} instances found)  {load_average()}"
            )


if __name__ == "__main__":
    main()
