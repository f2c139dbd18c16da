"""Benchmark of the VLM judges.

    .venv/bin/python bench/bench_vlm_judge.py --api [--requests 256] [--latency-ms 50]

``--api``: ``api_judge``'s throughput against the tests' chat-completions server
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
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode


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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", action="store_true", help="api_judge against a local server")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    if not args.api:
        parser.error("say what to measure: --api")

    import django

    django.setup()
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
        bench_api(requests=args.requests, latency_ms=args.latency_ms)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
