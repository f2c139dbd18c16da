"""Benchmark: label-submit-and-next with 20 simulated annotators on PostgreSQL (issue 2: p95 of
the server time under 50 ms).

    .venv/bin/python bench/bench_label_submit.py [--annotators 20] [--labels 25]
        [--database-url postgres://postgres@127.0.0.1:5432/biaslab_ui_bench]

Creates (drops and re-creates) the database named in the URL, migrates it, adds a study with
enough images for every annotator to give ``--labels`` labels (two labels per image), then runs
one thread per annotator. Each thread has its own Django test ``Client`` (own session, own
database connection over loopback) and does what label.js does: POST the label with
``HX-Request: true`` and get the partial of the next image back, then pauses as a person does
while looking at the image (``--think-ms``, default 1 s: the paper's annotators took a few
seconds per image; ``--think-ms 0`` is a back-to-back stress test that measures queueing).

The thread's CPU time per request (``time.thread_time``) is printed too: it does not grow with
other processes' load on a shared machine, unlike the wall time.

What "server time" means here: the wall time of ``Client.post`` — the whole Django request
path in-process (middleware, session and auth lookups, the view, both services, the template)
with no network and no HTTP parsing. The threads share one Python process, so under load the
figure also includes waiting for the GIL: an upper bound of what one worker process serving
these 20 annotators would take. ``--workers processes`` forks one process per annotator
instead, like a server with several worker processes. A single-annotator run comes first as the unloaded baseline.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_ui_bench"
IMAGE_RE = re.compile(r'id="current-image"[^>]*data-image-id="(\d+)"')
REQUEST_RE = re.compile(r'name="request_id" value="([0-9a-f]+)"')
VALUES = ("male", "female", "low_quality")


def recreate_database(url: str) -> None:
    """Drop and create the benchmark database, so every run starts from the same state."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise SystemExit(f"database name {name!r}: use lower-case letters, digits and _ only")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def configure(database_url: str, media_root: Path) -> None:
    """Point Django at the benchmark database and a temporary MEDIA_ROOT, then migrate."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DATABASE_URL"] = database_url
    os.environ["BIASLAB_MEDIA_ROOT"] = str(media_root)
    os.environ["DJANGO_DEBUG"] = "false"  # no query logging; as in production
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-secret-key-not-used-elsewhere")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_study(
    *, slug: str, annotators: int, n_images: int, media_root: Path, png_size: int = 16, noise: bool = False
) -> Any:
    """A study with ``n_images`` real PNG files (distinct bytes) and annotators <slug>00…

    ``noise`` fills the images with random pixels: files as large and as slow to decode as
    photographs, for the browser benchmark."""
    import hashlib
    import io

    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from PIL import Image as PILImage

    from annotate import roles
    from annotate.models import Image, Prompt, Study

    study = Study.objects.create(name=f"Benchmark {slug}", slug=slug)
    group, _ = Group.objects.get_or_create(name=roles.ANNOTATOR)
    users = []
    for i in range(annotators):
        user = get_user_model().objects.create_user(f"{slug}{i:02d}", password="bench-password-1")
        user.groups.add(group)
        users.append(user)
    study.annotators.add(*users)
    prompts = [
        Prompt.objects.create(study=study, category="profession", word=f"job{k}", text=f"a photo of a job{k}")
        for k in range(20)
    ]
    rows = []
    for n in range(n_images):
        if noise:
            img = PILImage.frombytes("RGB", (png_size, png_size), os.urandom(png_size * png_size * 3))
        else:
            img = PILImage.new("RGB", (png_size, png_size), ((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))
        img.putpixel((0, 0), (n % 256, (n // 256) % 256, (n // 65536) % 256))
        buffer = io.BytesIO()
        img.save(buffer, format="PNG")
        digest = hashlib.sha256(buffer.getvalue()).hexdigest()
        name = f"images/{digest[:2]}/{digest}.png"
        (media_root / name).parent.mkdir(parents=True, exist_ok=True)
        (media_root / name).write_bytes(buffer.getvalue())
        rows.append(
            Image(
                study=study,
                prompt=prompts[n % len(prompts)],
                t2i_model=("sdxl", "dalle3")[n % 2],
                source_path=f"{slug}/{n:05d}.png",
                sha256=digest,
                file=name,
                width=png_size,
                height=png_size,
                format="PNG",
            )
        )
    Image.objects.bulk_create(rows)
    return study, users


def _annotator_loop(
    study: Any,
    user: Any,
    labels: int,
    think_ms: int,
    timings: list[float],
    cpu_times: list[float],
    errors: list[str],
) -> None:
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(user)
    rng = random.Random(user.pk)
    try:
        html = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
        for _ in range(labels):
            found = IMAGE_RE.search(html)
            if not found:
                break  # no work left
            url = reverse("annotate:label_submit", args=[study.slug, int(found.group(1))])
            data = {
                "value": rng.choice(VALUES),
                "request_id": REQUEST_RE.search(html).group(1),
                "duration_ms": str(rng.randint(400, 3000)),
            }
            start, cpu = time.perf_counter(), time.thread_time()
            response = client.post(url, data, HTTP_HX_REQUEST="true")
            timings.append((time.perf_counter() - start) * 1000)
            cpu_times.append((time.thread_time() - cpu) * 1000)
            if response.status_code != 200:
                errors.append(f"{user.username}: HTTP {response.status_code}")
            html = response.content.decode()
            if think_ms:
                time.sleep(rng.uniform(0.5, 1.5) * think_ms / 1000)  # looking at the next image
    finally:
        connection.close()


def _annotator_process(study: Any, user: Any, labels: int, think_ms: int, results: Any) -> None:
    timings: list[float] = []
    cpu_times: list[float] = []
    errors: list[str] = []
    _annotator_loop(study, user, labels, think_ms, timings, cpu_times, errors)
    results.put((timings, cpu_times, errors))


def run(
    study: Any, users: list[Any], labels: int, think_ms: int, workers: str = "threads"
) -> tuple[list[float], list[float], list[str], float]:
    """Every annotator at once, as threads of this process (one worker, one GIL) or as forked
    processes (like a server with one worker process per busy annotator)."""
    timings: list[float] = []
    cpu_times: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    if workers == "processes":
        import multiprocessing

        from django.db import connections

        connections.close_all()  # children open their own connections; never share a socket
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        procs = [
            context.Process(target=_annotator_process, args=(study, user, labels, think_ms, results))
            for user in users
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            t, c, e = results.get()
            timings += t
            cpu_times += c
            errors += e
        for proc in procs:
            proc.join()
        return timings, cpu_times, errors, time.perf_counter() - start
    threads = [
        threading.Thread(
            target=_annotator_loop, args=(study, user, labels, think_ms, timings, cpu_times, errors)
        )
        for user in users
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return timings, cpu_times, errors, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def report(title: str, timings: list[float], cpu_times: list[float], errors: list[str], wall: float) -> None:
    if not timings:
        print(f"{title}: no requests")
        return
    print(
        f"{title}: {len(timings)} submits in {wall:.1f} s ({len(timings) / wall:.0f}/s); server time "
        f"p50 {statistics.median(timings):.1f} ms, p95 {percentile(timings, 95):.1f} ms, "
        f"max {max(timings):.1f} ms; Python CPU per request p50 {statistics.median(cpu_times):.1f} ms, "
        f"p95 {percentile(cpu_times, 95):.1f} ms; errors {len(errors)}"
    )
    for error in errors[:5]:
        print("  ", error)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--labels", type=int, default=25, help="labels per annotator")
    parser.add_argument(
        "--workers",
        choices=("threads", "processes"),
        default="threads",
        help="annotators as threads of one process (one GIL: a single worker) or as processes",
    )
    parser.add_argument(
        "--think-ms",
        type=int,
        default=1000,
        help="mean pause between an annotator's labels (uniform 0.5x-1.5x); 0 = back-to-back stress",
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    args = parser.parse_args()

    recreate_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="bench-label-") as tmp:
        media = Path(tmp) / "media"
        configure(args.database_url, media)
        from django.db import connection

        print(f"PostgreSQL {connection.cursor().connection.info.server_version} at {args.database_url}")
        print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        # Baseline: one annotator alone.
        solo_study, solo = make_study(slug="solo", annotators=1, n_images=args.labels, media_root=media)
        report("1 annotator, back-to-back", *run(solo_study, solo, args.labels, 0))
        # Load: every annotator labels at once; two labels per image.
        n_images = args.annotators * args.labels // 2 + args.annotators
        study, users = make_study(
            slug="load", annotators=args.annotators, n_images=n_images, media_root=media
        )
        report(
            f"{args.annotators} annotators ({args.workers}), ~{args.think_ms} ms between labels",
            *run(study, users, args.labels, args.think_ms, args.workers),
        )
        from django.db.models import Count, Max

        from annotate.models import Assignment, Label

        per_image = (
            Label.objects.filter(image__study=study)
            .values("image")
            .annotate(n=Count("id"))
            .aggregate(Max("n"))
        )
        print(
            f"labels stored {Label.objects.filter(image__study=study).count()}, "
            f"seats {Assignment.objects.filter(image__study=study).count()}, "
            f"most labels on one image {per_image['n__max']} (N = {study.labels_per_image})"
        )
        connection.close()


if __name__ == "__main__":
    main()
