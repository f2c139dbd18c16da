"""Benchmark: text-to-image generation, seconds per image (goal: SDXL, 30 steps, < 2.5 s).

    .venv/bin/python bench/bench_generate.py [--t2i-model sdxl] [--device cuda] [--steps 30]
        [--batch-size 4] [--images 8] [--dtype fp16] [--compile]
    .venv/bin/python bench/bench_generate.py --smoke      # CPU, tiny random SD, 64², 2 steps

Two figures:

- **pipeline**: ``pipe(prompts, generator=...)`` alone — denoising plus VAE decoding on the
  device, PIL images out. This is the s/image to compare with the goal.
- **generate_images loop**: ``generation.generation.generation_run``, exactly what the command
  runs — the same pipeline plus PNG encoding, validation and storage of every image and its row
  (a throw-away SQLite database and MEDIA_ROOT in a temporary folder). The gap between the two is
  the cost of storing; on a GPU it should be small next to 30 denoising steps.

Weights are resolved as ``generate_images`` does (``BIASLAB_T2I_<NAME>_WEIGHTS`` or the local HF
cache; never the network): without them the script says so and stops. The storing loop writes
to a throw-away SQLite database unless ``DATABASE_URL`` is set — for PostgreSQL use a database of
its own, which the script migrates and adds one study to per run::

    createdb -h 127.0.0.1 -U postgres biaslab_bench_generate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/biaslab_bench_generate \
        .venv/bin/python bench/bench_generate.py --smoke ``--smoke`` builds a tiny
random Stable Diffusion pipeline (tests.fakes.save_tiny_sd) and runs it on the CPU at 64x64 in
2 steps: it checks that both paths run, and its figures say nothing about SDXL on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import device_name, load_average, set_threads, sync

SDXL_GOAL_S = 2.5
PROMPT = "a photo of one real person who is a lawyer"


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny random SD: code path only.")
    parser.add_argument("--t2i-model", default="sdxl")
    parser.add_argument("--device", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--size", type=int, default=None, help="Height and width (default: model's own).")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="On CUDA only.")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (default: torch's own choice)."
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the UNet / transformer.")
    args = parser.parse_args()
    args.device = args.device or ("cpu" if args.smoke else "cuda")
    steps = args.steps or (2 if args.smoke else 30)
    size = args.size or (64 if args.smoke else None)
    batch = args.batch_size or (2 if args.smoke else 4)
    n_images = args.images or (6 if args.smoke else 8)

    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp_name:
        tmp = Path(tmp_name)
        configure_django(tmp)
        from detectors.torch_compat import ensure_torchvision

        ensure_torchvision()
        import torch

        set_threads(args.threads)
        from annotate.models import Study
        from generation.generation import (
            GenerationError,
            Job,
            PromptSpec,
            Settings,
            generation_run,
            image_seed,
            images_generate,
            pipeline_load,
            t2i_model_resolve,
        )

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            sys.exit("No CUDA device here: run with --smoke to check the code path on the CPU.")
        if args.smoke:
            from tests.fakes import save_tiny_sd

            model_ref = str(save_tiny_sd(tmp / "tiny-sd"))
        else:
            model_ref = args.t2i_model
        try:
            model = t2i_model_resolve(model_ref)
            pipe = pipeline_load(model, device=args.device)
        except GenerationError as exc:
            sys.exit(f"Not measured: {exc}")
        if args.device.startswith("cuda") and args.dtype == "bf16":
            pipe = pipe.to(dtype=torch.bfloat16)
        if args.compile:
            denoiser = "unet" if hasattr(pipe, "unet") else "transformer"
            setattr(pipe, denoiser, torch.compile(getattr(pipe, denoiser)))
        settings = Settings(device=args.device, batch_size=batch, steps=steps, height=size, width=size)
        print(
            f"bench_generate: {model.name} ({type(pipe).__name__}), {steps} steps, {size or 'default'} px, "
            f"batch {batch}, {device_name(args.device)}, {torch.get_num_threads()} torch threads, {load_average()}"
        )
        if args.smoke:
            print("SMOKE MODE: tiny random SD on the CPU. These figures are NOT SDXL GPU figures.")

        # 1. The pipeline alone (after one warm-up batch: allocations, compilation).
        spec = PromptSpec("profession", "lawyer", PROMPT)
        jobs = [
            Job(
                spec=spec,
                index=i,
                seed=image_seed(t2i_model=model.name, prompt=PROMPT, index=i),
                source_path="",
            )
            for i in range(n_images + batch)
        ]
        images_generate(pipe, jobs[:batch], settings)
        sync(args.device)
        started = time.perf_counter()
        done = 0
        for start in range(batch, batch + n_images, batch):
            done += len(images_generate(pipe, jobs[start : start + batch], settings))
        sync(args.device)
        pipe_s = (time.perf_counter() - started) / done
        line = f"pipeline:              {pipe_s:8.3f} s/image  ({1 / pipe_s:7.2f} images/s, {done} images)"
        if not args.smoke and model.name == "sdxl" and steps == 30:
            line += f"   goal < {SDXL_GOAL_S} s/image: {'met' if pipe_s < SDXL_GOAL_S else 'NOT met'}"
        print(f"{line}   ({load_average()})", flush=True)

        # 2. The generate_images loop: same pipeline, plus PNG encoding and storage.
        # A new study per run: on a kept PostgreSQL database an earlier run's images would be skipped.
        slug = f"bench-{time.time_ns()}"
        study = Study.objects.create(name=slug, slug=slug, protocol="gender")
        prompts = [PromptSpec("profession", f"job{i}", f"{PROMPT} number {i}") for i in range(n_images)]
        outcome = generation_run(
            study=study, model=model, prompts=prompts, per_prompt=1, settings=settings, pipe=pipe
        )
        loop_s = outcome.seconds / max(outcome.created, 1)
        print(
            f"generate_images loop: {loop_s:8.3f} s/image  ({1 / loop_s:7.2f} images/s, {outcome.created} images "
            f"stored; storing adds {max(loop_s - pipe_s, 0) * 1000:.0f} ms/image)   ({load_average()})",
            flush=True,
        )


if __name__ == "__main__":
    main()
