"""Benchmark: label-submit-and-next with 20 simulated annotators on PostgreSQL over loopback
(goal: p95 of the server time under 50 ms).

    .venv/bin/python bench/bench_label_submit.py [--annotators 20] [--labels 30] [--think-ms 1000]
        [--images 6000] [--prefilled 0.3] [--threads 4]
        [--database-url postgres://postgres@127.0.0.1:5432/biaslab_perf_bench | sqlite:////tmp/bench.sqlite3]

What it does:

1. Drops and re-creates the database named in the URL (also read from BENCH_DATABASE_URL or
   a PostgreSQL DATABASE_URL, e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/biaslab_bench),
   migrates it and adds a study of ``--images`` real PNG files (6,000 by default), the
   first ``--prefilled`` fraction of them already labelled by two earlier annotators, so the
   counters and the queue work at a realistic size, not on an empty study.
2. Profiles one annotator in-process (Django test client): SQL statements per submit-and-next
   (``CaptureQueriesContext``, BEGIN/COMMIT included) and the Python CPU time per request.
3. Starts a real HTTP server in a subprocess: Django's WSGI application behind the standard
   library's ``wsgiref`` server, ``--processes`` pre-forked worker processes (default 2, one per
   core here, as gunicorn would run) with a fixed pool of ``--threads`` worker threads each (one
   request per connection; never the test client), with
   ``DJANGO_SETTINGS_MODULE=bench.settings_bench`` — the project's settings plus the
   ``Server-Timing`` header of config/timing.py, DEBUG off.
4. Runs ``--annotators`` simulated annotators as HTTP clients (threads of this process,
   logged in with their own session): each loads the labeling screen, then does what its htmx
   form does — POST the label with htmx's headers (``HX_HEADERS``), read the next image's
   partial — and pauses like a person looking at the next image (``--think-ms``, uniform
   0.5x-1.5x; the paper's annotators took a few seconds per image, a fast one about one; 0 =
   back-to-back stress).
   A single annotator runs alone first: the unloaded baseline, which also warms the server up.

Printed, next to the load average (the machine is shared): p50/p95/p99 of the server time
(``Server-Timing`` app: all of Django's work for the request, from the first middleware to
the response — the figure the goal bounds), the server thread's CPU time, the statements
per request, the client's round trip (adds HTTP parsing, the socket and this process's own
scheduling), and requests/s. Finally it checks that no image got more than N labels.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_perf_bench"
IMAGE_RE = re.compile(r'id="current-image"[^>]*data-item-id="(\d+)"')
REQUEST_RE = re.compile(r'name="request_id" value="([0-9a-f]+)"')
CSRF_RE = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
TIMING_RE = re.compile(r"(\w+);dur=([\d.]+)(?:;desc=\"(\d+))?")
VALUES = ("male", "female", "low_quality")
# What htmx sends with the label form's POST (its hx-target, the form's id, the page it is on).
HX_HEADERS = {"HX-Request": "true", "HX-Target": "label-region", "HX-Trigger": "label-form"}


def database_url_default(fallback: str) -> str:
    """BENCH_DATABASE_URL, else DATABASE_URL when it names PostgreSQL, else ``fallback``. The
    database is dropped and re-created: never point it at one whose data you need."""
    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else fallback


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def recreate_database(url: str) -> None:
    """Drop and create the benchmark database, so every run starts from the same state
    (``sqlite:///path``: delete the file and its WAL files)."""
    if url.startswith("sqlite:"):
        path = Path(url.split(":///", 1)[1])
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
        return
    import psycopg

    name = url.rsplit("/", 1)[1]
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise SystemExit(f"database name {name!r}: use lower-case letters, digits and _ only")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


# Production mode as the server runs it, except that the benchmark speaks plain HTTP on loopback:
# no redirect to HTTPS, cookies allowed over HTTP. The secret is long enough for production mode.
PRODUCTION_OVER_HTTP = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    "DJANGO_SECURE_COOKIES": "false",
}
BENCH_SECRET_KEY = "bench-only-secret-key-not-used-elsewhere-" + "x7Q2mZ9pL4vR8tK1wB6nC3"


def configure(database_url: str, media_root: Path) -> None:
    """Point Django at the benchmark database and a temporary MEDIA_ROOT, then migrate."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DATABASE_URL"] = database_url
    os.environ["BIASLAB_MEDIA_ROOT"] = str(media_root)
    os.environ.update(PRODUCTION_OVER_HTTP)  # no query logging; as in production
    os.environ.setdefault("DJANGO_SECRET_KEY", BENCH_SECRET_KEY)
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

    from studies import permissions
    from studies.models import Image, ImageRole, Item, ItemImage, Prompt
    from studies.services import study_create

    study = study_create(slug=slug, protocol="gender", name=f"Benchmark {slug}")
    group, _ = Group.objects.get_or_create(name=permissions.ANNOTATOR)
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
    files, items = [], []
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
        files.append(Image(sha256=digest, file=name, width=png_size, height=png_size, format="PNG"))
        items.append(
            Item(
                study=study,
                key=f"{slug}/{n:05d}.png",
                prompt=prompts[n % len(prompts)],
                t2i_model=("sdxl", "dalle3")[n % 2],
            )
        )
    Image.objects.bulk_create(files, batch_size=2000)
    Item.objects.bulk_create(items, batch_size=2000)
    by_sha = dict(Image.objects.filter(sha256__in=[f.sha256 for f in files]).values_list("sha256", "pk"))
    by_key = dict(Item.objects.filter(study=study).values_list("key", "pk"))
    ItemImage.objects.bulk_create(
        [
            ItemImage(
                item_id=by_key[item.key],
                image_id=by_sha[f.sha256],
                role=ImageRole.IMAGE,
                source_path=item.key,
            )
            for item, f in zip(items, files, strict=True)
        ],
        batch_size=2000,
    )
    return study, users


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def prefill(study: Any, fraction: float) -> int:
    """Label the first ``fraction`` of the study's images by two earlier annotators (bulk rows,
    as an import would leave them): the work ahead starts where a real study is mid-way."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from annotate.models import Assignment, Label
    from studies.models import Item, Question

    earlier = [get_user_model().objects.create_user(f"{study.slug}-earlier{k}") for k in range(2)]
    study.annotators.add(*earlier)
    question = Question.objects.get(study=study, key="gender")
    items = list(Item.objects.filter(study=study).order_by("id")[: int(fraction * study.items.count())])
    now = timezone.now()
    seats = [
        Assignment(item=item, annotator=user, slot=k, claimed_at=now, expires_at=now, completed_at=now)
        for item in items
        for k, user in enumerate(earlier)
    ]
    Assignment.objects.bulk_create(seats, batch_size=2000)
    labels = [
        Label(item=item, question=question, annotator=user, value=VALUES[(item.pk + k) % 2])
        for item in items
        for k, user in enumerate(earlier)
    ]
    Label.objects.bulk_create(labels, batch_size=2000)
    Item.objects.filter(pk__in=[item.pk for item in items]).update(completed_seats=2)
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # Planner statistics and visibility map, as autovacuum keeps them on a live database;
            # right after a bulk load the planner would otherwise guess 5 images per study.
            cursor.execute("VACUUM ANALYZE")
    return len(items)


# --- in-process profile --------------------------------------------------------------------------


def profile(study: Any, user: Any, submits: int) -> None:
    """Statements and Python CPU per submit-and-next of one annotator, in-process."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    client = Client()
    client.force_login(user)
    html = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    counts, cpu_ms = [], []
    screen = "http://testserver" + reverse("annotate:label_study", args=[study.slug])
    headers = HX_HEADERS | {"HX-Current-URL": screen}
    for i in range(submits):
        url = reverse("annotate:label_submit", args=[study.slug, int(IMAGE_RE.search(html).group(1))])
        data = {
            "answer_gender": VALUES[i % 2],
            "request_id": REQUEST_RE.search(html).group(1),
            "duration_ms": "900",
        }
        with CaptureQueriesContext(connection) as queries:
            cpu = time.thread_time()
            response = client.post(url, data, headers=headers)
            cpu_ms.append((time.thread_time() - cpu) * 1000)
        counts.append(len(queries.captured_queries))
        html = response.content.decode()
    cpu_ms = cpu_ms[3:]  # the first requests compile templates and warm caches
    print(
        f"in-process profile, {submits} submits: statements per submit-and-next "
        f"{min(counts)}-{max(counts)} (median {statistics.median(counts):.0f}, BEGIN/COMMIT and "
        f"session/user lookups included); Python CPU p50 {statistics.median(cpu_ms):.1f} ms, "
        f"p95 {percentile(cpu_ms, 95):.1f} ms; {load()}"
    )


# --- the HTTP server -----------------------------------------------------------------------------


def serve(address: str, threads: int, processes: int) -> None:
    """Run Django's WSGI application behind wsgiref: ``processes`` worker processes (forked
    after the socket is bound, like a pre-fork server) with ``threads`` worker threads each."""
    import signal
    from concurrent.futures import ThreadPoolExecutor
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    import django
    from django.core.wsgi import get_wsgi_application

    django.setup()
    from django.contrib.staticfiles.handlers import StaticFilesHandler

    # Static files (scripts, CSS) for the browser benchmark, as a web server in front would.
    application = StaticFilesHandler(get_wsgi_application())

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class PooledWSGIServer(WSGIServer):
        """One request per connection, served by one of ``threads`` worker threads."""

        request_queue_size = 128
        pool: ThreadPoolExecutor

        def process_request(self, request: Any, client_address: Any) -> None:
            self.pool.submit(self._serve_one, request, client_address)

        def _serve_one(self, request: Any, client_address: Any) -> None:
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    host, port = address.rsplit(":", 1)
    server = PooledWSGIServer((host, int(port)), QuietHandler)
    server.set_app(application)
    children = []
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            children = []
            break
        children.append(pid)
    else:
        print(f"serving on {host}:{server.server_address[1]}", flush=True)

    def stop(signum: int, frame: Any) -> None:
        for child in children:
            os.kill(child, signal.SIGTERM)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    server.pool = ThreadPoolExecutor(max_workers=threads)  # after the fork: threads are per process
    server.serve_forever()


def server_env(database_url: str, media: Path) -> dict[str, str]:
    """The environment of a benchmark's server process: the bench settings, production-like."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings_bench",
        "DATABASE_URL": database_url,
        "BIASLAB_MEDIA_ROOT": str(media),
        **PRODUCTION_OVER_HTTP,
        "PYTHONPATH": str(ROOT),
    }
    env.setdefault("DJANGO_SECRET_KEY", BENCH_SECRET_KEY)
    return env


def start_server(
    database_url: str, media: Path, threads: int, processes: int = 2
) -> tuple[subprocess.Popen, str]:
    env = server_env(database_url, media)
    command = [
        sys.executable,
        __file__,
        "--serve",
        "127.0.0.1:0",
        "--threads",
        str(threads),
        "--processes",
        str(processes),
    ]
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving on "):
        proc.kill()
        raise SystemExit(f"the benchmark server did not start: {line!r}")
    return proc, line.split()[-1]


# --- the simulated annotators --------------------------------------------------------------------


@dataclass
class Samples:
    server_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    db_ms: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)
    round_trip_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Annotator:
    """One person at the labeling screen, over HTTP: session cookie, CSRF token, the partial."""

    def __init__(self, address: str, slug: str, session_key: str) -> None:
        self.host, port = address.split(":")
        self.port = int(port)
        self.slug = slug
        self.cookies = {"sessionid": session_key}

    def request(
        self, method: str, path: str, body: dict[str, str] | None = None, *, htmx: bool = True
    ) -> tuple[int, dict, str]:
        """One request on a new connection; a ``body`` is a form POST, sent as the labeling screen (htmx) sends
        it (``HX-Request``) unless ``htmx`` is false (a plain form submit)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        data = None
        if body is not None:
            data = urllib.parse.urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            if htmx:
                headers |= HX_HEADERS
                headers["HX-Current-URL"] = f"http://{self.host}:{self.port}/annotate/{self.slug}/label/"
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            html = response.read().decode()
            for header in response.headers.get_all("Set-Cookie") or []:
                name, value = header.split(";", 1)[0].split("=", 1)
                self.cookies[name] = value
            return response.status, dict(response.headers), html
        finally:
            conn.close()

    def label_loop(self, labels: int, think_ms: int, samples: Samples, seed: int) -> None:
        rng = random.Random(seed)
        status, _, html = self.request("GET", f"/annotate/{self.slug}/label/")
        if status != 200:
            samples.errors.append(f"GET label screen: HTTP {status}")
            return
        for _ in range(labels):
            found = IMAGE_RE.search(html)
            if not found:
                return  # no work left
            body = {
                "answer_gender": rng.choice(VALUES),
                "request_id": REQUEST_RE.search(html).group(1),
                "duration_ms": str(rng.randint(400, 3000)),
                "csrfmiddlewaretoken": CSRF_RE.search(html).group(1),
            }
            start = time.perf_counter()
            status, headers, html = self.request(
                "POST", f"/annotate/{self.slug}/label/{found.group(1)}/", body
            )
            round_trip = (time.perf_counter() - start) * 1000
            timing = {
                m.group(1): (float(m.group(2)), m.group(3))
                for m in TIMING_RE.finditer(headers.get("Server-Timing", ""))
            }
            with samples.lock:
                if status != 200 or "app" not in timing:
                    samples.errors.append(f"POST: HTTP {status}")
                    continue
                samples.round_trip_ms.append(round_trip)
                samples.server_ms.append(timing["app"][0])
                samples.cpu_ms.append(timing["cpu"][0])
                samples.db_ms.append(timing["db"][0])
                samples.statements.append(int(timing["db"][1]))
            if think_ms:
                time.sleep(rng.uniform(0.5, 1.5) * think_ms / 1000)  # looking at the next image


def session_key(user: Any) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def warm_up(address: str, study: Any, user: Any, requests: int) -> None:
    """Load the labeling screen a few times, so every worker process has imported the views
    and compiled the templates (~200 ms, once per process) before anything is measured."""
    annotator = Annotator(address, study.slug, session_key(user))
    for _ in range(requests):
        annotator.request("GET", f"/annotate/{study.slug}/label/")


def run_http(address: str, study: Any, users: list[Any], labels: int, think_ms: int) -> tuple[Samples, float]:
    samples = Samples()
    annotators = [Annotator(address, study.slug, session_key(user)) for user in users]
    threads = [
        threading.Thread(target=a.label_loop, args=(labels, think_ms, samples, i))
        for i, a in enumerate(annotators)
    ]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples, time.perf_counter() - start


def report(title: str, samples: Samples, wall: float) -> None:
    if not samples.server_ms:
        print(f"{title}: no requests; errors {samples.errors[:5]}")
        return

    def dist(values: list[float]) -> str:
        return (
            f"p50 {statistics.median(values):.1f}, p95 {percentile(values, 95):.1f}, "
            f"p99 {percentile(values, 99):.1f}, max {max(values):.1f} ms"
        )

    n = len(samples.server_ms)
    print(f"{title}: {n} submits in {wall:.1f} s ({n / wall:.1f} requests/s); {load()}")
    print(f"  server time (Server-Timing app)  {dist(samples.server_ms)}")
    print(f"  server CPU of the request        {dist(samples.cpu_ms)}")
    print(f"  of which in database calls       {dist(samples.db_ms)}")
    print(f"  client round trip                {dist(samples.round_trip_ms)}")
    print(
        f"  statements per request {min(samples.statements)}-{max(samples.statements)} "
        f"(median {statistics.median(samples.statements):.0f}; BEGIN/COMMIT not counted); "
        f"errors {len(samples.errors)}"
    )
    for error in samples.errors[:5]:
        print("   ", error)


def check_labels(study: Any) -> None:
    from django.db.models import Count, Max

    from annotate.models import Assignment, Label

    most = Label.objects.filter(item__study=study).values("item").annotate(n=Count("id")).aggregate(Max("n"))
    print(
        f"labels stored {Label.objects.filter(item__study=study).count()}, "
        f"seats {Assignment.objects.filter(item__study=study).count()}, "
        f"most labels on one item {most['n__max']} (N = {study.labels_per_item})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--labels", type=int, default=30, help="labels per annotator")
    parser.add_argument("--images", type=int, default=6000, help="images in the study")
    parser.add_argument("--prefilled", type=float, default=0.3, help="fraction of images already labelled")
    parser.add_argument("--threads", type=int, default=4, help="worker threads per server process")
    parser.add_argument(
        "--processes",
        type=int,
        default=2,
        help="server worker processes (pre-fork; default: 2, the cores here)",
    )
    parser.add_argument(
        "--think-ms",
        type=int,
        default=1000,
        help="mean pause between an annotator's labels (uniform 0.5x-1.5x); 0 = back-to-back stress",
    )
    parser.add_argument("--database-url", default=database_url_default(DEFAULT_DATABASE_URL))
    parser.add_argument("--serve", metavar="HOST:PORT", help=argparse.SUPPRESS)  # the server subprocess
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.threads, args.processes)
        return

    recreate_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="bench-label-") as tmp:
        media = Path(tmp) / "media"
        configure(args.database_url, media)
        from django.db import connection

        if connection.vendor == "postgresql":
            print(f"PostgreSQL {connection.cursor().connection.info.server_version} at {args.database_url}")
        else:
            import sqlite3

            print(f"SQLite {sqlite3.sqlite_version} at {args.database_url}")
        print(f"{os.cpu_count()} CPUs, {load()}")
        study, users = make_study(
            slug="load", annotators=args.annotators + 2, n_images=args.images, media_root=media
        )
        done = prefill(study, args.prefilled)
        print(f"study of {args.images} images, {done} already labelled by two earlier annotators")
        profile(study, users[-1], submits=25)
        solo, loaded = users[-2], users[: args.annotators]
        connection.close()
        server, address = start_server(args.database_url, media, args.threads, args.processes)
        try:
            print(
                f"server: wsgiref, {args.processes} processes x {args.threads} worker threads at {address}, "
                "bench.settings_bench"
            )
            warm_up(address, study, solo, requests=8 * args.processes)
            report("1 annotator, back-to-back (baseline)", *run_http(address, study, [solo], args.labels, 0))
            report(
                f"{args.annotators} annotators, ~{args.think_ms} ms between labels",
                *run_http(address, study, loaded, args.labels, args.think_ms),
            )
        finally:
            server.terminate()
            server.wait(timeout=10)
        check_labels(study)
        connection.close()


if __name__ == "__main__":
    main()
