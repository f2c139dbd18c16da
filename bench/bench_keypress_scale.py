"""Benchmark: the labeling key press (submit and next item) at growing study sizes.

    .venv/bin/python bench/bench_keypress_scale.py [--sizes 6000,60000,250000]
        [--database-url postgres://postgres@127.0.0.1:5432/biaslab_keypress_bench | sqlite:////tmp/kp.sqlite3]
        [--presses 200] [--labelled 0.02] [--no-analyze]

For each size, in a child process of its own: drop and re-create the database, migrate, and
build a gender study of that many one-image items with bulk SQL (INSERT … SELECT over a number
series, not the importer: seconds instead of minutes), ``--labelled`` of them (spread over the
study) already labelled by two earlier annotators, as an import of labels leaves them. Then,
exactly as the bulk importers end, ``studies.database.database_analyze()`` when the code has it
(no ANALYZE otherwise: a freshly imported database). A new annotator then presses
``--presses`` keys back to back through Django's test client (in-process: the whole request,
middleware, session, view, template; no HTTP socket).

Printed per size: the key press's p50/p95 server time in ms (wall time of the request,
the first 5 presses left out: they compile templates), the statements per key press
(median, BEGIN/COMMIT included) and how long building the study took. The database is
dropped and re-created: never point it at one whose data you need.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_label_submit import (  # noqa: E402
    IMAGE_RE,
    REQUEST_RE,
    VALUES,
    configure,
    load,
    percentile,
    recreate_database,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_keypress_bench"
WARM_UP = 5


def build_study(size: int, labelled: float) -> tuple[Any, Any]:
    """A gender study of ``size`` one-image items, every ``1/labelled``-th labelled twice, with
    bulk SQL; and the annotator who will press the keys."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection, transaction

    from studies import permissions
    from studies.services import study_create

    study = study_create(slug="scale", protocol="gender", name="Scale")
    group, _ = Group.objects.get_or_create(name=permissions.ANNOTATOR)
    users = []
    for name in ("presser", "earlier0", "earlier1"):
        user = get_user_model().objects.create_user(name, password="bench-password-1")
        user.groups.add(group)
        users.append(user)
    study.annotators.add(*users)
    question = study.questions.get(key="gender")
    every = max(1, round(1 / labelled)) if labelled > 0 else 0
    pg = connection.vendor == "postgresql"
    if pg:
        series = "SELECT x FROM generate_series(1, %(size)s) AS x"
        sha = "lpad(x::text, 64, '0')"
        key = "'scale/' || lpad(x::text, 7, '0') || '.png'"
        cte = ""
        source = f"FROM ({series}) AS n"
    else:
        cte = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < %(size)s) "
        sha = "printf('%%064d', x)"
        key = "'scale/' || printf('%%07d', x) || '.png'"
        source = "FROM n"
    now = "CURRENT_TIMESTAMP"
    params = {"size": size, "study": study.pk, "every": every or size + 1, "q": question.pk}
    done = "(x %% %(every)s = 7 %% %(every)s)"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"{cte}INSERT INTO studies_image (sha256, file, width, height, format, created_at) "
            f"SELECT {sha}, 'images/' || {sha} || '.png', 16, 16, 'PNG', {now} {source}",
            params,
        )
        cursor.execute(
            f"{cte}INSERT INTO studies_item (study_id, key, t2i_model, params, metadata, question_keys, "
            f"queue, completed_seats, created_at) "
            f"SELECT %(study)s, {key}, CASE WHEN x %% 2 = 0 THEN 'sdxl' ELSE 'dalle3' END, '{{}}', "
            f"'{{}}', '[]', 1, CASE WHEN {done} THEN 2 ELSE 0 END, {now} {source}",
            params,
        )
        # Items and images were numbered in the same order: link the n-th item to the n-th image.
        cursor.execute(
            "INSERT INTO studies_itemimage (item_id, image_id, role, source_path) "
            "SELECT i.id, i.id - (SELECT MIN(id) FROM studies_item WHERE study_id = %(study)s) "
            "+ (SELECT MIN(id) FROM studies_image), 'image', i.key FROM studies_item i "
            "WHERE i.study_id = %(study)s",
            params,
        )
        for slot, user in enumerate(users[1:]):
            cursor.execute(
                "INSERT INTO annotate_assignment (item_id, annotator_id, slot, claimed_at, expires_at, "
                f"completed_at) SELECT id, %(user)s, {slot}, {now}, {now}, {now} FROM studies_item "
                "WHERE study_id = %(study)s AND completed_seats = 2",
                params | {"user": user.pk},
            )
            cursor.execute(
                "INSERT INTO annotate_label (item_id, question_id, annotator_id, value, reason, "
                f"request_id, created_at, updated_at) SELECT id, %(q)s, %(user)s, "
                f"CASE WHEN id %% 2 = 0 THEN 'male' ELSE 'female' END, '', '', {now}, {now} "
                "FROM studies_item WHERE study_id = %(study)s AND completed_seats = 2",
                params | {"user": user.pk},
            )
    return study, users[0]


def database_analyze() -> str:
    """What the bulk importers run at their end, when this code has it."""
    try:
        from studies.database import database_analyze as analyze
    except ImportError:
        return "no database_analyze (fresh statistics-less database)"
    start = time.perf_counter()
    analyze()
    return f"database_analyze {time.perf_counter() - start:.1f} s"


def press(study: Any, user: Any, presses: int) -> tuple[list[float], list[int]]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    client = Client()
    client.force_login(user)
    html = client.get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    times, counts = [], []
    for i in range(presses + WARM_UP):
        item, request_id = IMAGE_RE.search(html), REQUEST_RE.search(html)
        if item is None or request_id is None:
            raise SystemExit(f"no item on the labeling screen after {i} presses")
        url = reverse("annotate:label_submit", args=[study.slug, int(item.group(1))])
        data = {"answer_gender": VALUES[i % 2], "request_id": request_id.group(1), "duration_ms": "900"}
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            response = client.post(url, data, HTTP_HX_REQUEST="true")
            elapsed = (time.perf_counter() - start) * 1000
        assert response.status_code == 200, response.content[:500]
        if i >= WARM_UP:
            times.append(elapsed)
            counts.append(len(queries.captured_queries))
        html = response.content.decode()
    return times, counts


def one_size(url: str, size: int, presses: int, labelled: float, analyze: bool) -> None:
    recreate_database(url)
    with tempfile.TemporaryDirectory() as media:
        configure(url, Path(media))
        from django.db import connection

        start = time.perf_counter()
        study, user = build_study(size, labelled)
        built = time.perf_counter() - start
        analyzed = database_analyze() if analyze else "--no-analyze: fresh statistics-less database"
        times, counts = press(study, user, presses)
        print(
            f"| {connection.vendor} | {size:,} | {statistics.median(times):.1f} | {percentile(times, 95):.1f} "
            f"| {statistics.median(counts):.0f} | built in {built:.0f} s; {analyzed}; {load()} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="6000,60000,250000")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--presses", type=int, default=200)
    parser.add_argument("--labelled", type=float, default=0.02, help="fraction of items labelled twice")
    parser.add_argument(
        "--no-analyze", action="store_true", help="skip database_analyze: the planner sees no statistics"
    )
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_size:
        one_size(args.database_url, args.one_size, args.presses, args.labelled, not args.no_analyze)
        return
    print("| database | items | key press p50 ms | p95 ms | statements | notes |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    each_size_in_child(
        __file__,
        args.sizes,
        "--database-url",
        args.database_url,
        "--presses",
        str(args.presses),
        "--labelled",
        str(args.labelled),
        *(["--no-analyze"] if args.no_analyze else []),
    )


def each_size_in_child(script: str, sizes: str, *args: str) -> None:
    """Run ``script --one-size N *args`` for each N of the comma-separated ``sizes``, one fresh
    process each (a size's memory and caches never reach the next)."""
    for size in (int(s) for s in sizes.split(",")):
        subprocess.run([sys.executable, script, "--one-size", str(size), *args], check=True)


if __name__ == "__main__":
    main()
