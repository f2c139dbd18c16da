"""Benchmark: a panel's participants arriving through one join link, labelling to the quota on
PostgreSQL against a real multi-process HTTP server (goal: p95 of a key press under 100 ms).

    .venv/bin/python bench/bench_crowd_load.py [--participants 100] [--quota 20] [--think-ms 1000]
        [--images 2000] [--labels-per-item 3] [--gold 60] [--gold-rate 0.1] [--random-clickers 10]
        [--arrival-s 10] [--threads 4] [--processes 2] [--server gunicorn|wsgiref]
        [--database-url postgres://postgres@127.0.0.1:5432/biaslab_bench_crowd]
        [--cache-url redis://127.0.0.1:6379/0 | ''] [--client-nice 0]

What it does (timing header, report and the wsgiref server: bench_label_submit.py's, imported):

1. Drops and re-creates the database, adds a gender study of ``--images`` PNG files with
   ``--labels-per-item`` labels per item under the majority rule, makes ``--gold`` of its items
   gold with ``import_gold``, sets ``create_study --gold-rate`` and makes one join link with
   ``create_join_link --quota`` (the panel appends ``PROLIFIC_PID``).
2. Starts the server, bench.settings_bench with ``--processes`` processes x ``--threads``
   threads: gunicorn (the deployment's server, its gthread workers; the default when installed)
   or ``--server wsgiref`` (bench_label_submit.py's pre-forked standard-library server). Every participant comes from 127.0.0.1, so the per-address limit on
   new accounts (BIASLAB_JOIN_THROTTLE, 60/hour by default) is raised for the server: a panel's
   participants come from as many addresses.
3. ``--participants`` HTTP clients (threads) arrive spread over ``--arrival-s`` seconds, each
   with its own PROLIFIC_PID: open the link, read the guidelines, consent (a plain form POST),
   open the labeling screen, then press keys as the labeling screen does (htmx) (the form's fields, POST with
   ``HX-Request``, the next item's partial back) with ``--think-ms`` between presses (uniform
   0.5x-1.5x), until the server sends them to the completion page, whose code they check. A
   careful participant answers the simulation's truth 90 % of the time; ``--random-clickers``
   of them answer at random.

Printed with the load average: the server time of a key press (``Server-Timing`` app: all of
Django's work for the request) p50/p95/p99, its CPU and database time, the statements per
request, the same for the arrival requests (link, guidelines, consent, first screen), then
the checks, each OK or BROKEN: no participant got an item twice, every one reached the quota
and saw the code, no item over N labels, seats and counters match the labels, the finals are
what the study's rule makes of the labels, no gold answer stored as a label or a final. Exits
1 when a check is broken or a request failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from html import unescape
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_label_submit import (
    CSRF_RE,
    IMAGE_RE,
    ROOT,
    TIMING_RE,
    Annotator,
    Samples,
    configure,
    database_url_default,
    load,
    make_study,
    recreate_database,
    report,
    server_env,
    start_server,
    warm_up,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_bench_crowd"
ANSWERS = ("male", "female")
CODE = "BENCH-CROWD-CODE"


def truth(item_id: int) -> str:
    """The simulation's true answer of an item (its gold answer when it is a gold item)."""
    return random.Random(item_id).choice(ANSWERS)


FORM_RE = re.compile(r'<form\b[^>]*\bid="label-form".*?</form>', re.S)
FIELD_RE = re.compile(r"<(?:input|button)\b([^>]*)>")
ATTR_RE = re.compile(r'([\w:-]+)="([^"]*)"')


class LabelForm:
    """The fields the labeling screen sends from the labeling form: its hidden inputs and, per answer
    field, the choices its buttons (or radio buttons) offer. Read with regular expressions, not an
    HTML parser: the clients share the server's cores, so they should cost it as little as possible."""

    def __init__(self, page: str) -> None:
        self.hidden: dict[str, str] = {}
        self.choices: dict[str, list[str]] = defaultdict(list)
        form = FORM_RE.search(page)
        for field in FIELD_RE.finditer(form.group(0) if form else ""):
            attr = {name: unescape(value) for name, value in ATTR_RE.findall(field.group(1))}
            name = attr.get("name", "")
            if attr.get("type") == "hidden" and name:
                self.hidden[name] = attr.get("value", "")
            elif name.startswith("answer_"):
                self.choices[name].append(attr.get("value", ""))


class PanelParticipant(Annotator):
    """One panel participant over HTTP: no account until the join link makes one."""

    def __init__(self, address: str, slug: str, panel_id: str) -> None:
        super().__init__(address, slug, session_key="")
        self.cookies = {}
        self.panel_id = panel_id
        self.items: list[int] = []  # the items this participant answered, in order
        self.finished = False
        self.code_seen = False

    def timed(self, samples: Samples, method: str, path: str, body: dict[str, str] | None = None, **kw: Any):
        """The request, its figures kept when the server sends ``Server-Timing`` (the benchmark
        server's settings); an HTTP error is kept as an error."""
        start = time.perf_counter()
        status, headers, html = self.request(method, path, body, **kw)
        round_trip = (time.perf_counter() - start) * 1000
        timing = {
            m.group(1): (float(m.group(2)), m.group(3))
            for m in TIMING_RE.finditer(headers.get("Server-Timing", ""))
        }
        with samples.lock:
            if status >= 400:
                samples.errors.append(f"{self.panel_id} {method} {path}: HTTP {status}")
            elif "app" in timing:
                samples.round_trip_ms.append(round_trip)
                samples.server_ms.append(timing["app"][0])
                samples.cpu_ms.append(timing["cpu"][0])
                samples.db_ms.append(timing["db"][0])
                samples.statements.append(int(timing["db"][1]))
        return status, headers, html

    def run(
        self,
        join_path: str,
        arrival_s: float,
        think_ms: int,
        careful: bool,
        arrivals: Samples,
        presses: Samples,
        seed: int,
    ) -> None:
        rng = random.Random(seed)
        time.sleep(arrival_s)
        status, headers, _ = self.timed(arrivals, "GET", f"{join_path}?PROLIFIC_PID={self.panel_id}")
        if status != 302 or not headers.get("Location", "").endswith("/join/guidelines/"):
            arrivals.errors.append(f"{self.panel_id}: the link answered {status} {headers.get('Location')}")
            return
        status, _, html = self.timed(arrivals, "GET", "/join/guidelines/")
        csrf = CSRF_RE.search(html)
        if status != 200 or not csrf:
            arrivals.errors.append(f"{self.panel_id}: guidelines {status}")
            return
        body = {"consent": "yes", "csrfmiddlewaretoken": csrf.group(1)}
        status, headers, _ = self.timed(arrivals, "POST", "/join/guidelines/", body, htmx=False)
        if status != 302:
            arrivals.errors.append(f"{self.panel_id}: consent {status}")
            return
        status, _, html = self.timed(arrivals, "GET", headers["Location"])
        while status == 200:
            found = IMAGE_RE.search(html)
            if not found:
                presses.errors.append(f"{self.panel_id}: no item after {len(self.items)} (no work left?)")
                return
            item_id = int(found.group(1))
            form = LabelForm(html)
            [(field, offered)] = form.choices.items()
            right = truth(item_id)
            answer = right if careful and rng.random() < 0.9 else rng.choice(ANSWERS)
            assert answer in offered, (answer, offered)
            time.sleep(rng.uniform(0.5, 1.5) * think_ms / 1000)  # looking at the image
            body = form.hidden | {field: answer, "duration_ms": str(rng.randint(400, 3000))}
            self.items.append(item_id)
            status, headers, html = self.timed(
                presses, "POST", f"/annotate/{self.slug}/label/{item_id}/", body
            )
            if "HX-Redirect" in headers:  # the quota reached: htmx goes where it says
                status, _, html = self.request("GET", headers["HX-Redirect"])
                self.finished = status == 200
                self.code_seen = CODE in html
                return


def make_crowd_study(args: argparse.Namespace, media: Path) -> tuple[Any, Any, str]:
    """The study (through the commands a researcher runs), its warm-up annotator, the link's path."""
    from django.core.management import call_command

    from studies.models import Item

    study, [warmer] = make_study(slug="crowd", annotators=1, n_images=args.images, media_root=media)
    call_command(
        "create_study",
        "crowd",
        protocol="gender",
        labels_per_item=args.labels_per_item,
        agreement="majority",
        stdout=io.StringIO(),
    )
    gold_ids = list(Item.objects.filter(study=study).order_by("id").values_list("id", flat=True))[
        :: args.images // args.gold
    ][: args.gold]
    gold_csv = media / "gold.csv"
    keys = dict(Item.objects.filter(pk__in=gold_ids).values_list("pk", "key"))
    gold_csv.write_text(
        "image,question,answer\n" + "".join(f"{keys[pk]},gender,{truth(pk)}\n" for pk in gold_ids)
    )
    call_command("import_gold", str(gold_csv), study="crowd", stdout=io.StringIO())
    call_command(
        "create_study",
        "crowd",
        protocol="gender",
        gold_rate=args.gold_rate,
        min_gold_accuracy=0.8,
        min_gold=2,
        stdout=io.StringIO(),
    )
    out = io.StringIO()
    call_command(
        "create_join_link",
        study="crowd",
        quota=args.quota,
        completion_url="https://app.prolific.com/submissions/complete?cc=" + CODE,
        completion_code=CODE,
        stdout=out,
        stderr=io.StringIO(),
    )
    path = re.sub(r"^https?://[^/]+", "", out.getvalue().strip())
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # planner statistics after the bulk load, as autovacuum keeps them
    study.refresh_from_db()
    return study, warmer, path


def start_gunicorn(
    database_url: str, media: Path, threads: int, processes: int
) -> tuple[subprocess.Popen, str]:
    """gunicorn serving config.wsgi with the benchmark's settings (as start_server's wsgiref):
    ``processes`` workers (sync with one thread, as the deploy guide runs it; else gthread of
    ``threads`` threads) on a free loopback port, once it accepts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = server_env(database_url, media)
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        f"--bind=127.0.0.1:{port}",
        f"--workers={processes}",
        f"--threads={threads}",
        f"--worker-class={'sync' if threads == 1 else 'gthread'}",
        "--backlog=128",
        "--timeout=120",
        "--log-level=warning",
    ]
    proc = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited with {proc.returncode} before serving")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not accept connections within 60 s")


# --- the checks ------------------------------------------------------------------------------------


def checks(study: Any, participants: list[PanelParticipant], quota: int) -> list[tuple[str, bool, str]]:
    """(what, holds, detail) of every invariant, read from the database after the run."""
    from django.db.models import Count

    from annotate.models import Assignment, FinalLabel, FinalLabelSource, GoldResponse, Label
    from crowd.models import Participant
    from metrics.consensus import agreed_answer
    from studies.models import GoldAnswer, Item

    n = study.labels_per_item
    gold = dict(GoldAnswer.objects.filter(item__study=study).values_list("item_id", "value"))
    results: list[tuple[str, bool, str]] = []

    def check(what: str, broken: list[Any], total: int) -> None:
        results.append(
            (
                what,
                not broken,
                f"{len(broken)} of {total} broken {broken[:3]}" if broken else f"{total} checked",
            )
        )

    twice = [p.panel_id for p in participants if len(p.items) != len(set(p.items))]
    check("no participant answered an item twice (the items served)", twice, len(participants))
    per_pair = (
        Assignment.objects.filter(item__study=study)
        .values("item", "annotator")
        .annotate(k=Count("id"))
        .filter(k__gt=1)
    )
    check(
        "no participant holds two seats on an item",
        list(per_pair),
        Assignment.objects.filter(item__study=study).count(),
    )
    rows = list(Participant.objects.filter(study=study).values_list("panel_id", "user_id", "finished_at"))
    done = Counter(
        Assignment.objects.filter(item__study=study, completed_at__isnull=False).values_list(
            "annotator_id", flat=True
        )
    )
    short = [(pid, done[user]) for pid, user, finished in rows if finished is None or done[user] != quota]
    check(
        f"every participant finished with exactly the quota ({quota} items, gold included)", short, len(rows)
    )
    check(
        "every participant saw the completion code",
        [p.panel_id for p in participants if not p.code_seen],
        len(participants),
    )
    labels: dict[tuple[int, int], list[str]] = defaultdict(list)
    labelled: set[tuple[int, int]] = set()
    for item_id, question_id, annotator_id, value in Label.objects.filter(item__study=study).values_list(
        "item_id", "question_id", "annotator_id", "value"
    ):
        labels[(item_id, question_id)].append(value)
        labelled.add((item_id, annotator_id))
    check(
        f"no item over N = {n} labels",
        [unit for unit, values in labels.items() if len(values) > n],
        len(labels),
    )
    seats = list(
        Assignment.objects.filter(item__study=study).values_list(
            "item_id", "annotator_id", "slot", "completed_at"
        )
    )
    ordinary = [s for s in seats if s[0] not in gold]
    check(f"ordinary seats in slots 0..{n - 1}", [s[:3] for s in ordinary if s[2] >= n], len(ordinary))
    completed = {(item, annotator) for item, annotator, _, at in ordinary if at is not None}
    check(
        "a label for each completed seat and a completed seat for each label",
        sorted(completed ^ labelled)[:10],
        len(completed | labelled),
    )
    per_item = Counter(item for item, _ in completed)
    counters = dict(Item.objects.filter(study=study).values_list("id", "completed_seats"))
    check(
        "each item's completed_seats counter equals its completed seats",
        [(i, c, per_item[i]) for i, c in counters.items() if c != per_item[i]],
        len(counters),
    )
    finals = {
        (f[0], f[1]): (f[2], f[3])
        for f in FinalLabel.objects.filter(item__study=study).values_list(
            "item_id", "question_id", "value", "source"
        )
    }
    wrong = []
    for unit, values in labels.items():
        expected = agreed_answer(values, needed=n, rule=study.agreement)
        if finals.get(unit) != ((expected, FinalLabelSource.AGREED) if expected else None):
            wrong.append((unit, values, finals.get(unit)))
    wrong += [(unit, finals[unit]) for unit in finals if unit not in labels]
    check(f"finals are what the {study.agreement} rule makes of the labels", wrong, len(labels))
    in_labels = (
        Label.objects.filter(item_id__in=gold).count() + FinalLabel.objects.filter(item_id__in=gold).count()
    )
    check("no gold answer stored as a label or a final", [in_labels] if in_labels else [], len(gold))
    gold_seats = [s for s in seats if s[0] in gold]
    responses = list(
        GoldResponse.objects.filter(item__study=study).values_list(
            "item_id", "annotator_id", "value", "correct"
        )
    )
    answered = {(item, annotator) for item, annotator, _, _ in responses}
    bad = [s[:3] for s in gold_seats if s[2] < n or (s[3] is not None) != ((s[0], s[1]) in answered)]
    bad += [r for r in responses if r[3] != (r[2] == gold[r[0]])]
    check("gold seats above the N seats, one response per completed one, scored right", bad, len(gold_seats))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--participants", type=int, default=100)
    parser.add_argument("--quota", type=int, default=20, help="items per participant (gold included)")
    parser.add_argument("--think-ms", type=int, default=1000, help="mean pause before each key press")
    parser.add_argument("--images", type=int, default=2000, help="items in the study")
    parser.add_argument("--labels-per-item", type=int, default=3)
    parser.add_argument("--gold", type=int, default=60, help="gold items among them")
    parser.add_argument("--gold-rate", type=float, default=0.1)
    parser.add_argument("--random-clickers", type=int, default=10, help="participants answering at random")
    parser.add_argument("--arrival-s", type=float, default=10.0, help="participants arrive spread over this")
    parser.add_argument("--threads", type=int, default=4, help="worker threads per server process")
    parser.add_argument("--processes", type=int, default=2, help="server worker processes")
    parser.add_argument(
        "--server",
        choices=("gunicorn", "wsgiref"),
        default="gunicorn" if importlib.util.find_spec("gunicorn") else "wsgiref",
        help="the HTTP server (default: gunicorn when installed)",
    )
    parser.add_argument("--database-url", default=database_url_default(DEFAULT_DATABASE_URL))
    parser.add_argument(
        "--cache-url",
        default="redis://127.0.0.1:6379/0",
        help="the server's BIASLAB_CACHE_URL: Redis, as the deploy guide sets it for several processes "
        "(sessions and rate limits shared); '' for the per-process default",
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="lower the participants' (this process's) CPU priority once the server runs, so that on a "
        "small machine they do not take the server's and PostgreSQL's cores (a panel's browsers are "
        "elsewhere); 19 is the lowest",
    )
    args = parser.parse_args()
    if args.cache_url:
        os.environ["BIASLAB_CACHE_URL"] = args.cache_url
        os.environ["BIASLAB_CACHE_KEY_PREFIX"] = f"bench-crowd-{os.getpid()}"
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("bench_crowd_load.py runs on PostgreSQL: --database-url postgres://…")

    recreate_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="bench-crowd-") as tmp:
        media = Path(tmp) / "media"
        media.mkdir()
        configure(args.database_url, media)
        from django.db import connection

        print(
            f"PostgreSQL {connection.cursor().connection.info.server_version}, {os.cpu_count()} CPUs, {load()}"
        )
        study, warmer, join_path = make_crowd_study(args, media)
        print(
            f"study of {args.images} items, {args.gold} gold, N = {study.labels_per_item} ({study.agreement}), "
            f"gold rate {study.gold_rate}; one join link, quota {args.quota}"
        )
        connection.close()
        os.environ["BIASLAB_JOIN_THROTTLE"] = f"{10 * args.participants}/minute"
        launch = start_gunicorn if args.server == "gunicorn" else start_server
        server, address = launch(args.database_url, media, args.threads, args.processes)
        try:
            print(
                f"server: {args.server}, {args.processes} processes x {args.threads} worker threads at {address}; "
                f"cache {args.cache_url or 'per process (locmem)'}; participants' niceness {args.client_nice}"
            )
            warm_up(address, study, warmer, requests=8 * args.processes)
            os.nice(args.client_nice)
            rng = random.Random(7)
            clickers = set(rng.sample(range(args.participants), min(args.random_clickers, args.participants)))
            people = [
                PanelParticipant(address, study.slug, f"pid{i:04d}{rng.getrandbits(32):08x}")
                for i in range(args.participants)
            ]
            arrivals, presses = Samples(), Samples()
            threads = [
                threading.Thread(
                    target=p.run,
                    args=(
                        join_path,
                        rng.uniform(0, args.arrival_s),
                        args.think_ms,
                        i not in clickers,
                        arrivals,
                        presses,
                        i,
                    ),
                )
                for i, p in enumerate(people)
            ]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - start
        finally:
            server.terminate()
            server.wait(timeout=30)
        report(f"{args.participants} participants, key presses (~{args.think_ms} ms apart)", presses, wall)
        report("  arrivals (link, guidelines, consent, first screen)", arrivals, wall)
        results = checks(study, people, args.quota)
        for what, holds, detail in results:
            print(f"{'OK    ' if holds else 'BROKEN'} {what}: {detail}")
        connection.close()
    broken = [what for what, holds, _ in results if not holds]
    if broken or presses.errors or arrivals.errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
