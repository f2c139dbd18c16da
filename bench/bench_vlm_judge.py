"""Benchmark: the VLM judges — images/s and ms per question.

    .venv/bin/python bench/bench_vlm_judge.py --vlm [--device cpu|cuda] [--model FOLDER]
        [--images 16] [--questions 15] [--batch-sizes 1,8,16] [--size 512] [--threads 0]

``--vlm`` (``bench_vlm``): what is timed is ``VlmJudgeDetector.predict`` as ``run_detectors``
calls it, on photos shipped in scikit-image / matplotlib resized to ``--size``², each image asked
``--questions`` yes/no questions (an attributes study's 15 by default), for each ``--option
batch_size`` (questions per forward pass, each with both choices) in ``--batch-sizes``. Without
``--model`` the model is the tests' tiny random LLaVA (16 px images, one layer of hidden size 16,
one token per character) built in a temporary folder: it measures the judge's own overhead
(prompts, the processor, padding, the scoring), not a real model. ``--model`` takes a real
image-text-to-text chat model's folder (bf16 on CUDA). One warm-up call first; the load average
is printed beside each figure (the CPU machines are shared).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import device_name, load_average, set_threads, sync
from bench_yolo_objects import sample_photos

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")


def yes_no_questions(n: int) -> tuple:
    """The attributes study's presence questions (cycled to ``n``), answered yes or no."""
    from detectors.judges import JudgeQuestion
    from metrics import gep

    keys = list(gep.ATTRIBUTE_KEYS)
    return tuple(
        JudgeQuestion(
            f"{keys[i % len(keys)]}{i // len(keys) or ''}",
            gep.ATTRIBUTE_QUESTIONS[keys[i % len(keys)]],
            (("yes", "Yes"), ("no", "No")),
        )
        for i in range(n)
    )


def bench_vlm(
    *, device: str, model: str, n_images: int, n_questions: int, batch_sizes: list[int], size: int
) -> list[dict[str, float]]:
    """Time ``vlm_judge`` per ``batch_size``; prints one line each and returns the figures."""
    import torch

    from detectors.judges import StudyAsk
    from detectors.plugins.vlm_judge import VlmJudgeDetector

    images = sample_photos(n_images, size)
    questions = yes_no_questions(n_questions)
    with tempfile.TemporaryDirectory(prefix="bench-vlm-") as folder:
        if not model:
            from tests.detectors.tiny_models import save_tiny_vlm

            model_path = str(save_tiny_vlm(Path(folder) / "tiny-vlm"))
        else:
            model_path = model
        print(
            f"vlm_judge on {device_name(device)} ({device}), model "
            f"{model if model else 'tiny random LLaVA (tests)'}, {n_images} images of {size}² px, "
            f"{n_questions} yes/no questions each, torch threads {torch.get_num_threads()}"
        )
        figures = []
        for batch_size in batch_sizes:
            judge = VlmJudgeDetector(device=device, model=model_path, batch_size=batch_size)
            judge.questions_bind(StudyAsk("answers", questions))
            started = time.perf_counter()
            judge.ensure_loaded()
            load_s = time.perf_counter() - started
            judge.predict(images[:1])  # warm-up: first allocations, the prompts' cache
            sync(device)
            started = time.perf_counter()
            judge.predict(images)
            sync(device)
            seconds = time.perf_counter() - started
            asked = n_images * n_questions
            figure = {
                "batch_size": batch_size,
                "images_per_s": n_images / seconds,
                "ms_per_question": seconds / asked * 1000,
            }
            figures.append(figure)
            print(
                f"  batch_size {batch_size:>3} questions/pass: {figure['images_per_s']:8.2f} images/s, "
                f"{figure['ms_per_question']:7.2f} ms/question (load {load_s:.1f} s)  {load_average()}"
            )
        return figures


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vlm", action="store_true", help="Time vlm_judge (bench_vlm).")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="", help="A real model's folder (default: the tiny random LLaVA).")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--questions", type=int, default=15, help="Yes/no questions per image (default 15).")
    parser.add_argument(
        "--batch-sizes", default="1,8,16", help="Questions per forward pass (default 1,8,16)."
    )
    parser.add_argument("--size", type=int, default=512, help="Side of the input images (default 512).")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's choice).")
    args = parser.parse_args()
    if not args.vlm:
        parser.error("choose what to time: --vlm")
    set_threads(args.threads)

    import django

    django.setup()
    if args.vlm:
        bench_vlm(
            device=args.device,
            model=args.model,
            n_images=args.images,
            n_questions=args.questions,
            batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
            size=args.size,
        )


if __name__ == "__main__":
    main()
