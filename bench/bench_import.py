"""Benchmark: import 6,000 small PNGs through ``images_import`` (under a minute).

    .venv/bin/python bench/bench_import.py [--images 6000] [--size 64]

Generates the PNGs and a manifest in a temporary folder, imports them into a fresh study, then
imports again (the re-run must accept nothing), and prints the figures. Without DATABASE_URL it
uses a throw-away SQLite database in the temporary folder; with DATABASE_URL (PostgreSQL) it
imports into a study named bench-<pid> and deletes it afterwards. MEDIA_ROOT is always temporary.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _configure(tmp: Path) -> bool:
    """Point Django at temporary storage; returns True when the database is a throw-away one."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode
    os.environ["BIASLAB_MEDIA_ROOT"] = str(tmp / "media")
    throwaway = not os.environ.get("DATABASE_URL")
    if throwaway:
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return throwaway


def _generate(folder: Path, count: int, size: int, kind: str) -> Path:
    import numpy as np
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    photo = None
    if kind == "photo":
        from skimage import data

        photo = np.asarray(PILImage.fromarray(data.astronaut()).resize((size, size)))

    folder.mkdir(parents=True)
    manifest = folder.parent / "manifest.csv"
    models = ("sdxl", "sd-1.5", "dalle-3")
    with open(manifest, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "t2i_model", "prompt", "category", "word", "seed", "index", "params"])
        for n in range(count):
            if kind == "noise":
                # Incompressible pixels: the worst case for file size and decoding time.
                img = PILImage.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
            elif photo is not None:
                # A real photo shifted per image: compresses like a T2I model's output does.
                img = PILImage.fromarray(np.roll(photo, n, axis=1))
            else:
                img = PILImage.new("RGB", (size, size), ((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))
            img.putpixel((0, 0), (n % 256, (n // 256) % 256, 7))
            model = models[n % len(models)]
            name = f"{model}/{n:05d}.png"
            (folder / model).mkdir(exist_ok=True)
            img.save(folder / name, format="PNG")
            word = f"job{n % 50}"
            writer.writerow(
                [
                    name,
                    model,
                    f"a photo of one real person who is a {word}",
                    "profession",
                    word,
                    n,
                    n % 4,
                    '{"steps": 30}',
                ]
            )
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6000)
    parser.add_argument("--size", type=int, default=64, help="Width and height of each PNG in pixels.")
    parser.add_argument(
        "--kind",
        choices=("flat", "photo", "noise"),
        default="flat",
        help="flat colours (default), a real photo shifted per image, or random pixels.",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="biaslab-bench-") as name:
        tmp = Path(name)
        throwaway = _configure(tmp)
        from studies.ingest import images_import
        from studies.models import Image, Item
        from studies.services import study_create

        started = time.perf_counter()
        manifest = _generate(tmp / "images", args.images, args.size, args.kind)
        generated = time.perf_counter() - started
        study = study_create(slug=f"bench-{os.getpid()}", protocol="gender")
        try:
            started = time.perf_counter()
            first = images_import(study=study, manifest_path=manifest, root=tmp / "images")
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            second = images_import(study=study, manifest_path=manifest, root=tmp / "images")
            second_s = time.perf_counter() - started
            stored = Item.objects.filter(study=study).count()
        finally:
            if not throwaway:
                files = list(
                    Image.objects.filter(item_images__item__study=study).values_list("pk", flat=True)
                )
                study.delete()  # its items, their image links, prompts and questions
                # The files no other study uses (the same bytes may be an image of another study).
                Image.objects.filter(pk__in=files, item_images__isnull=True).delete()
        from django.db import connection

        size_mb = sum(f.stat().st_size for f in (tmp / "media").rglob("*") if f.is_file()) / 1e6
        print(
            f"database: {connection.vendor}; images: {args.images} {args.kind} PNGs of "
            f"{args.size}x{args.size} px, {size_mb:.0f} MB stored; load average {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} CPUs"
        )
        print(f"generate files: {generated:.1f} s")
        print(
            f"first import:  {first_s:.1f} s ({args.images / first_s:.0f} images/s) — accepted {first.accepted}, "
            f"duplicates {first.duplicates}, rejected {len(first.rejected)}"
        )
        print(
            f"re-import:     {second_s:.1f} s — accepted {second.accepted}, duplicates {second.duplicates}, "
            f"rejected {len(second.rejected)}"
        )
        print(
            f"rows stored: {stored}; target: first import under 60 s -> {'OK' if first_s < 60 else 'TOO SLOW'}"
        )


if __name__ == "__main__":
    main()
