"""Benchmark: editing seed photos (BiasPainter), in pairs/s.

    .venv/bin/python bench/bench_edit.py [--editor sd15] [--device cuda] [--steps 50] [--strength 0.8]
        [--batch-size 8] [--pairs 16] [--size 512] [--dtype fp16]
    .venv/bin/python bench/bench_edit.py --smoke      # CPU, tiny random img2img and InstructPix2Pix, 64², 2 steps

Two figures per editor:

- **pipeline**: ``generation.edit_pipeline.images_edit`` alone — encoding the seed, denoising and
  decoding on the device, PIL images out (img2img runs ``strength x steps`` denoising steps).
- **edit_images loop**: ``generation.editing.edit_run``, exactly what the command runs — the same
  pipeline plus PNG encoding, validation and storage of every pair (a throw-away SQLite database
  and MEDIA_ROOT in a temporary folder; the seeds are real photos shipped in scikit-image and
  matplotlib, imported from a folder as ``--seeds DIR`` does).

Weights are resolved as ``edit_images`` does (``BIASLAB_T2I_<NAME>_WEIGHTS`` or the local HF
cache; never the network): without them the script says so and stops. ``--smoke`` builds tiny
random pipelines (tests/generation/tiny_editors.py) and runs them on the CPU: it checks that both
paths run, and its figures say nothing about SD 1.5 on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import device_name, load_average, set_threads, sync

PROMPT = "a person who is a lawyer"


def configure_django(tmp: Path) -> None:
    """MEDIA_ROOT under ``tmp``; a throw-away SQLite database there unless DATABASE_URL is set."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode
    os.environ["BIASLAB_MEDIA_ROOT"] = str(tmp / "media")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{tmp / 'bench.sqlite3'}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def write_seed_photos(folder: Path) -> None:
    """Three faces shipped in packages, as a seeds folder with its manifest."""
    import matplotlib.cbook
    import numpy as np
    from PIL import Image
    from skimage import data

    folder.mkdir(parents=True)
    Image.fromarray(data.astronaut()).save(folder / "astronaut.png")
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as handle:
        Image.open(handle).convert("RGB").save(folder / "hopper.png")
    Image.fromarray(np.stack([data.camera()] * 3, axis=-1)).save(folder / "camera.png")
    (folder / "seeds.csv").write_text(
        "image,gender\nastronaut.png,female\nhopper.png,female\ncamera.png,male\n"
    )


def bench_editor(args: argparse.Namespace, model_ref: str, tmp: Path, seeds_dir: Path) -> None:
    import torch
    from django.conf import settings as django_settings

    from generation.edit_pipeline import (
        NATIVE_SIZES,
        EditSettings,
        EditTask,
        edit_seed,
        editor_load,
        editor_resolve,
        images_edit,
        seed_input,
    )
    from generation.editing import edit_run, seeds_from_folder
    from generation.generation import GenerationError, PromptSpec
    from studies.models import Study

    try:
        model = editor_resolve(model_ref)
        pipe = editor_load(model, device=args.device)
    except GenerationError as exc:
        sys.exit(f"Not measured: {exc}")
    if args.device.startswith("cuda") and args.dtype == "bf16":
        pipe = pipe.to(dtype=torch.bfloat16)
    size = args.size or (64 if args.smoke else NATIVE_SIZES.get(model.name, 512))
    pix2pix = "InstructPix2Pix" in type(pipe).__name__
    settings = EditSettings(
        device=args.device,
        batch_size=args.batch,
        steps=args.steps,
        strength=None if pix2pix else args.strength,
        size=size,
    )
    seeds = seeds_from_folder(seeds_dir)
    print(
        f"bench_edit: {model.name} ({type(pipe).__name__}), {args.steps or 'default'} steps, "
        f"strength {settings.strength if not pix2pix else 'n/a'}, {size} px, batch {args.batch}, "
        f"{device_name(args.device)}, {torch.get_num_threads()} torch threads, {load_average()}"
    )

    # 1. The pipeline alone (after one warm-up batch).
    media = Path(django_settings.MEDIA_ROOT)
    tasks = []
    for i in range(args.pairs + args.batch):
        seed = seeds[i % len(seeds)]
        noise = edit_seed(editor=model.name, prompt=PROMPT, seed_sha256=seed.image.sha256, index=i)
        tasks.append(EditTask(PROMPT, noise, seed.image.sha256, str(media / seed.image.file)))
    inputs = {task.seed_sha256: seed_input(task.seed, size) for task in tasks}

    def run(batch: list) -> int:
        return len(images_edit(pipe, batch, settings, [inputs[task.seed_sha256] for task in batch]))

    for _ in range(2):  # warm-up: allocations, oneDNN / cuDNN algorithm choice
        run(tasks[: args.batch])
    sync(args.device)
    started = time.perf_counter()
    done = sum(run(tasks[s : s + args.batch]) for s in range(args.batch, args.batch + args.pairs, args.batch))
    sync(args.device)
    pipe_s = (time.perf_counter() - started) / done
    print(
        f"  pipeline:          {pipe_s:8.3f} s/pair  ({1 / pipe_s:7.2f} pairs/s, {done} pairs)   ({load_average()})",
        flush=True,
    )

    # 2. The edit_images loop: a new pair-change study per run.
    slug = f"bench-{time.time_ns()}"
    study = Study.objects.create(name=slug, slug=slug, protocol="pair_change")
    n_prompts = max(1, -(-args.pairs // len(seeds)))
    prompts = [PromptSpec("profession", f"job{i}", f"{PROMPT} number {i}") for i in range(n_prompts)]
    outcome = edit_run(study=study, model=model, seeds=seeds, prompts=prompts, settings=settings, pipe=pipe)
    loop_s = outcome.seconds / max(outcome.created, 1)
    print(
        f"  edit_images loop:  {loop_s:8.3f} s/pair  ({1 / loop_s:7.2f} pairs/s, {outcome.created} pairs stored; "
        f"storing adds {max(loop_s - pipe_s, 0) * 1000:.0f} ms/pair)   ({load_average()})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny random editors: code path only.")
    parser.add_argument("--editor", default="sd15")
    parser.add_argument("--device", default=None)
    parser.add_argument("--steps", type=int, default=None, help="Default: the editor's own (2 in --smoke).")
    parser.add_argument("--strength", type=float, default=None, help="img2img only (default: the editor's).")
    parser.add_argument("--size", type=int, default=None, help="Seed side (default: the editor's native).")
    parser.add_argument("--batch-size", dest="batch", type=int, default=None)
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="On CUDA only.")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's).")
    args = parser.parse_args()
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    args.steps = args.steps or (2 if args.smoke else None)
    args.batch = args.batch or (2 if args.smoke else 8)
    args.pairs = args.pairs or (6 if args.smoke else 16)

    with tempfile.TemporaryDirectory(prefix="bench-edit-") as tmp_name:
        tmp = Path(tmp_name)
        configure_django(tmp)
        from detectors.torch_compat import ensure_torchvision

        ensure_torchvision()
        import torch

        set_threads(args.threads)
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            sys.exit("No CUDA device here: run with --smoke to check the code path on the CPU.")
        write_seed_photos(tmp / "seeds")
        if args.smoke:
            from tests.generation.tiny_editors import save_tiny_img2img, save_tiny_pix2pix

            print("SMOKE MODE: tiny random editors on the CPU. These figures are NOT SD 1.5 GPU figures.")
            references = [
                str(save_tiny_img2img(tmp / "tiny-img2img")),
                str(save_tiny_pix2pix(tmp / "tiny-pix2pix")),
            ]
        else:
            references = [args.editor]
        for reference in references:
            bench_editor(args, reference, tmp, tmp / "seeds")


if __name__ == "__main__":
    main()
