"""Benchmark: the VLM judges — images/s and ms per question.

    .venv/bin/python bench/bench_vlm_judge.py --vlm [--device cpu|cuda] [--model FOLDER]
        [--images 16] [--questions 15] [--batch-sizes 1,8,16] [--size 512] [--threads 0]
    .venv/bin/python bench/bench_vlm_judge.py --api [--requests 256] [--latency-ms 50]

``--vlm`` (``bench_vlm``): what is timed is ``VlmJudgeDetector.predict`` as ``run_detectors``
calls it, on photos shipped in scikit-image / matplotlib resized to ``--size``², each image asked
``--questions`` yes/no questions (an attributes study's 15 by default), for each ``--option
batch_size`` (questions per forward pass, each with both choices) in ``--batch-sizes``. Without
``--model`` the model is the tests' tiny random LLaVA (16 px images, one layer of hidden size 16,
one token per character) built in a temporary folder: it measures the judge's own overhead
(prompts, the processor, padding, the scoring), not a real model. ``--model`` takes a real
image-text-to-text chat model's folder (bf16 on CUDA). One warm-up call first; the load average
is printed beside each figure (the CPU machines are shared).

    .venv/bin/python bench/bench_vlm_judge.py --api [--requests 256] [--latency-ms 50]

``--api`` (``bench_api``): ``api_judge``'s throughput against the tests' chat-completions server
(tests/detectors/fake_chat_server.py) started on 127.0.0.1 with a fixed server-side latency
(``--latency-ms``, default 50 ms, a small VLM's answer on a GPU), at concurrency 1, 8 and 32.
Each level asks ``--requests`` questions about distinct images (one question each, 256² photos,
batches of ``max(concurrency, 8)`` images as ``run_detectors --batch-size`` would hand them
over), with the response cache empty: requests/s over the whole level, and the p50 / p95 of one
request's round trip (client side, JSON encoding of the image included). A last pass asks the
same questions again: every answer comes from the cache, no request is sent.

The server runs in the same Python process as the client, so at high concurrency both share
one GIL: the figures are a floor for the client against a real server. A throw-away SQLite
database (or Django's test database on the ``DATABASE_URL`` server) holds the cache.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _common import device_name, load_average, set_threads, sync
from bench_yolo_objects import sample_photos

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")


def yes_no_questions(n: int) -> tuple:
    """The attributes study's presence questions (cycled to ``n``), answered yes or no."""
    from detectors.judges import JudgeQuestion
    from metrics import gep_design

    keys = list(gep_design.ATTRIBUTE_KEYS)
    return tuple(
        JudgeQuestion(
            f"{keys[i % len(keys)]}{i // len(keys) or ''}",
            gep_design.ATTRIBUTE_QUESTIONS[keys[i % len(keys)]],
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


def _photos(n: int, offset: int) -> list:
    """``n`` distinct 256² photos (a gradient shifted per image: no two encode alike)."""
    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 255, 256, dtype=np.float32)
    x, y = np.meshgrid(ramp, ramp)
    photos = []
    for number in range(offset, offset + n):  # blue and a shifted gradient tell them apart
        blue = np.full((256, 256), number % 256, np.float32)
        photos.append(
            Image.fromarray((np.stack([x + number // 256 * 13, y, blue], axis=-1) % 256).astype(np.uint8))
        )
    return photos


def bench_api(*, requests: int = 256, latency_ms: float = 50.0, levels: Sequence[int] = (1, 8, 32)) -> None:
    """api_judge at each concurrency in ``levels`` against the local server (module docstring)."""
    from detectors.models import JudgeResponse
    from detectors.plugins.api_judge import ApiJudgeDetector, JudgeQuestion
    from tests.detectors.fake_chat_server import running

    question = JudgeQuestion(
        key="gender",
        text="What is the gender of the person?",
        choices=(("male", "Male"), ("female", "Female")),
    )
    with running() as server:
        server.latency = latency_ms / 1000
        os.environ["BIASLAB_JUDGE_BASE_URL"] = server.base_url
        os.environ.pop("BIASLAB_JUDGE_API_KEY", None)
        print(
            f"api_judge against a local chat-completions server, {latency_ms:g} ms server latency, {requests} requests a level"
        )
        print(
            f"{'concurrency':>11} {'requests/s':>10} {'p50 ms':>7} {'p95 ms':>7} {'sent':>5} {'ideal/s':>8}"
        )
        for index, concurrency in enumerate(levels):
            images = _photos(requests, offset=index * requests)
            detector = ApiJudgeDetector(model="judge-model", concurrency=concurrency)
            detector.ensure_loaded()
            round_trips: list[float] = []
            attempt = detector._attempt

            def timed(body, attempt=attempt, round_trips=round_trips):
                started = time.perf_counter()
                try:
                    return attempt(body)
                finally:
                    round_trips.append(time.perf_counter() - started)

            detector._attempt = timed  # type: ignore[method-assign]  # the bench's stopwatch
            batch = max(concurrency, 8)
            sent_before = len(server.requests)
            started = time.perf_counter()
            for start in range(0, requests, batch):
                chunk = images[start : start + batch]
                detector.answers_for(chunk, [[question]] * len(chunk))
            seconds = time.perf_counter() - started
            sent = len(server.requests) - sent_before
            p50 = statistics.median(round_trips) * 1000
            p95 = statistics.quantiles(round_trips, n=20)[18] * 1000
            ideal = concurrency / (latency_ms / 1000)
            print(
                f"{concurrency:>11} {sent / seconds:>10.1f} {p50:>7.1f} {p95:>7.1f} {sent:>5} {ideal:>8.0f}"
            )
            detector.close()
        # Everything again: answered from the cache, nothing sent.
        detector = ApiJudgeDetector(model="judge-model", concurrency=levels[-1])
        images = _photos(requests, offset=0)
        sent_before = len(server.requests)
        started = time.perf_counter()
        for start in range(0, requests, 32):
            chunk = images[start : start + 32]
            detector.answers_for(chunk, [[question]] * len(chunk))
        seconds = time.perf_counter() - started
        print(
            f"cached re-run: {requests} answers in {seconds:.2f} s ({requests / seconds:.0f} answers/s), "
            f"{len(server.requests) - sent_before} requests sent, {JudgeResponse.objects.count()} cached rows"
        )


def _with_test_database(run) -> None:
    """Run ``run()`` on a throw-away database (api_judge's cache lives there)."""
    from django.db import connection
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    settings_dict = connection.settings_dict
    tmp = None
    if connection.vendor == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="bench-judge-")
        settings_dict.setdefault("TEST", {})["NAME"] = str(Path(tmp.name) / "bench.sqlite3")
    old_name = settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        run()
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
        if tmp is not None:
            tmp.cleanup()


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vlm", action="store_true", help="Time vlm_judge (bench_vlm).")
    parser.add_argument(
        "--api", action="store_true", help="Time api_judge against a local server (bench_api)."
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="", help="A real model's folder (default: the tiny random LLaVA).")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--questions", type=int, default=15, help="Yes/no questions per image (default 15).")
    parser.add_argument(
        "--batch-sizes", default="1,8,16", help="Questions per forward pass (default 1,8,16)."
    )
    parser.add_argument("--size", type=int, default=512, help="Side of the input images (default 512).")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's choice).")
    parser.add_argument("--requests", type=int, default=256, help="api_judge: requests a level.")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="api_judge: the server's latency.")
    args = parser.parse_args()
    if not (args.vlm or args.api):
        parser.error("choose what to time: --vlm, --api or both")
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
    if args.api:
        _with_test_database(lambda: bench_api(requests=args.requests, latency_ms=args.latency_ms))


if __name__ == "__main__":
    main()
