"""Benchmark: pair-change measurement on this machine's CPU, in images/s and pairs/s.

    .venv/bin/python bench/bench_measure.py [--images 8] [--size 512] [--threads 0] [--no-overlays]

A BiasPainter pair is a seed photo and its edit; the offline detectors ``face_age_gender`` (age,
gender) and ``skin_tone`` (gray) measure both. Each detector is loaded as ``run_detectors``
would and predicts ``--images`` real photos shipped in scikit-image / matplotlib (three faces and
one photo without a person, cycled, resized to ``--size``², SD 1.5's output size by default),
after one warm-up image, once with dlib's CNN face detector (the default) and once with HOG.
Overlays are written to a temporary MEDIA_ROOT (``--no-overlays`` measures without them).

Figures per setting: images/s of each detector; **pairs/s** = 1 / (2 x seconds per image of both
detectors), both images of every pair measured; and pairs/s with the seeds shared as in the paper
(54 seed photos, 228 prompts: one output image per pair plus 1/228 of a seed). Nothing touches
the network or a database. Figures on a shared machine are noisy: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from _common import load_average, set_threads

PROMPTS_PER_SEED = 228  # the paper's prompt list (section 3.2)


def sample_photos(n: int, size: int) -> list:
    """Astronaut, Grace Hopper, the cameraman and a cup of coffee (no person), cycled to n."""
    import matplotlib.cbook
    import numpy as np
    from PIL import Image
    from skimage import data

    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        hopper = Image.open(handle).convert("RGB")
    camera = Image.fromarray(np.stack([data.camera()] * 3, axis=-1))
    photos = [Image.fromarray(data.astronaut()), hopper, camera, Image.fromarray(data.coffee())]
    return [photos[i % len(photos)].resize((size, size)) for i in range(n)]


def seconds_per_image(key: str, photos: list, options: dict) -> tuple[float, int]:
    """(seconds per image after one warm-up image, faces found) for detector ``key``."""
    from detectors import registry

    detector = registry.get(key, **options)
    detector.ensure_loaded()
    detector.predict(photos[:1])
    started = time.perf_counter()
    outputs = detector.predict(photos)
    seconds = (time.perf_counter() - started) / len(photos)
    return seconds, sum(1 for output in outputs if output.as_output()["face"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own).")
    parser.add_argument("--no-overlays", action="store_true", help="Measure without writing overlays.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-measure-") as tmp:
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
        os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode
        os.environ["BIASLAB_MEDIA_ROOT"] = tmp  # overlays go here
        import django

        django.setup()
        set_threads(args.threads)
        photos = sample_photos(args.images, args.size)
        overlays = {"overlays": "false"} if args.no_overlays else {}
        print(
            f"bench_measure: {args.images} photos at {args.size}², CPU x{os.cpu_count()}, "
            f"overlays {'off' if args.no_overlays else 'on'}, {load_average()}"
        )
        for method in ("cnn", "hog"):
            total = 0.0
            for key in ("face_age_gender", "skin_tone"):
                seconds, faces = seconds_per_image(key, photos, {"face_method": method, **overlays})
                total += seconds
                print(
                    f"  {key:16s} face_method={method}: {seconds * 1000:8.1f} ms/image "
                    f"({1 / seconds:6.2f} images/s, faces in {faces}/{len(photos)})   ({load_average()})",
                    flush=True,
                )
            both = 1 / (2 * total)
            shared = 1 / (total * (1 + 1 / PROMPTS_PER_SEED))
            print(
                f"  pairs, face_method={method}: {both:6.2f} pairs/s measuring both images, "
                f"{shared:6.2f} pairs/s with seeds shared (54 seeds x {PROMPTS_PER_SEED} prompts)"
            )


if __name__ == "__main__":
    main()
