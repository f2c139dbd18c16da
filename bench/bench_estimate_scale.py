"""Benchmark: the few-label gender estimate of a large study -- ``estimate_bias`` and
the estimate page -- with a complete sampling round, the case where the estimator does its work.

    .venv/bin/python bench/bench_estimate_scale.py [--sizes 250000,1000000] [--prompts 500]
        [--budget 2000] [--database-url postgres://postgres@127.0.0.1:5432/biaslab_estimate_bench
        | sqlite:////tmp/estimate.sqlite3]

Per size, in a child process of its own: drop and re-create the database, migrate, build a
gender study of that many one-image items with bulk SQL (as ``bench_keypress_scale.py`` builds
it; no labels), spread over ``--prompts`` prompts per T2I model (two models), give every image one
prediction of the detector ``bench`` (male, female and filtered in turn, a tenth of them wrong
against the labels below), run what the importers run after a bulk import
(``database_analyze``), draw one uniform sampling round of ``--budget`` labels
(``sampling_round_create``, timed), and give every drawn image a final label (bulk SQL; men
on even ids). Then, each in a child of its own: ``estimate_bias --format json`` (time inside the
command, peak RSS of the child from ``wait4``), and the estimate page through Django's test client
twice (the first request computes, the second reads the cache).

The database is dropped and re-created: never point it at one whose data you need.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_keypress_scale import build_study, each_size_in_child  # noqa: E402
from bench_label_submit import configure, load, recreate_database  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/biaslab_estimate_bench"
DETECTOR = "bench"


def build(size: int, prompts: int, budget: int) -> str:
    """The study, its predictions and one complete round; what it took, as text."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from estimates.services import sampling_round_create
    from studies.database import database_analyze
    from studies.models import Prompt

    start = time.perf_counter()
    study, _ = build_study(size, 0.0)
    get_user_model().objects.create_superuser("bench-researcher", password="bench-password-1")
    made = Prompt.objects.bulk_create(
        [
            Prompt(study=study, category="profession", word=f"job{p}", text=f"a photo of a job{p}")
            for p in range(prompts)
        ]
    )
    first = min(p.pk for p in made)
    question = study.questions.get(key="gender")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE studies_item SET prompt_id = %s + (id / 2) %% %s WHERE study_id = %s",
            [first, prompts, study.pk],
        )
        # Labels (below) say male on even item ids; the detector agrees on nine in ten images
        # and says filtered on every seventh.
        verdict = (
            "CASE WHEN i.id %% 7 = 0 THEN 'filtered' "
            "WHEN (i.id %% 2 = 0) = (i.id %% 10 <> 3) THEN 'male' ELSE 'female' END"
        )
        label_json = {
            "postgresql": "json_build_object('label', {v}, 'reason', '', 'scores', json_build_object())::jsonb",
        }.get(connection.vendor, "json_object('label', {v}, 'reason', '', 'scores', json_object())")
        cursor.execute(
            "INSERT INTO detectors_prediction (image_id, detector, version, kind, status, output, error, "
            f"created_at) SELECT ii.image_id, %s, '1', 'gender', 'ok', {label_json.format(v=verdict)}, '', "
            "CURRENT_TIMESTAMP FROM studies_itemimage ii JOIN studies_item i ON i.id = ii.item_id "
            "WHERE i.study_id = %s",
            [DETECTOR, study.pk],
        )
    database_analyze()
    built = time.perf_counter() - start
    start = time.perf_counter()
    sampling_round = sampling_round_create(study=study, detector=DETECTOR, budget=budget, seed=1)
    drawn = time.perf_counter() - start
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO annotate_finallabel (item_id, question_id, value, source, decided_at, note) "
            "SELECT ri.item_id, %s, CASE WHEN ri.item_id %% 2 = 0 THEN 'male' ELSE 'female' END, 'agreed', "
            "CURRENT_TIMESTAMP, '' FROM estimates_rounditem ri WHERE ri.round_id = %s AND ri.selected",
            [question.pk, sampling_round.pk],
        )
    database_analyze()
    return (
        f"built in {built:.0f} s; round of {sampling_round.n_selected} drawn in {drawn:.1f} s "
        f"(sampling_round_create)"
    )


def _child(url: str, media: str, what: str) -> dict[str, Any]:
    """Run ``what`` (command or page) in a child process; its JSON, with its peak RSS."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", what, "--database-url", url, "--media", media],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{what} failed ({status}): {out[-500:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["rss_mb"] = usage.ru_maxrss / 1024
    return result


def child(url: str, media: str, what: str) -> None:
    configure(url, Path(media))
    from django.conf import settings

    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["*"]
    if what == "command":
        import io

        from django.core.management import call_command

        out = io.StringIO()
        start = time.perf_counter()
        call_command(
            "estimate_bias", "--study", "scale", "--detector", DETECTOR, "--format", "json", stdout=out
        )
        seconds = time.perf_counter() - start
        body = json.loads(out.getvalue())
        widths = {m: v["model_bias_score"]["ci95"] for m, v in body.items() if isinstance(v, dict)}
        print(json.dumps({"seconds": seconds, "ci95": widths}))
        return
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-researcher"))
    times = []
    for _ in range(2):
        start = time.perf_counter()
        response = client.get("/reports/estimate/?study=scale")
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, response.status_code
    print(json.dumps({"first": times[0], "again": times[1]}))


def one_size(url: str, size: int, prompts: int, budget: int) -> None:
    recreate_database(url)
    with tempfile.TemporaryDirectory() as media:
        configure(url, Path(media))
        from django.db import connection

        vendor = connection.vendor
        notes = build(size, prompts, budget)
        connection.close()
        command = _child(url, media, "command")
        page = _child(url, media, "page")
        print(
            f"| {vendor} | {size:,} | {command['seconds']:.1f} s, {command['rss_mb']:.0f} MB | "
            f"{page['first']:.2f} s / {page['again']:.2f} s, {page['rss_mb']:.0f} MB | {notes}; {load()} |",
            flush=True,
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        parser = argparse.ArgumentParser()
        parser.add_argument("--child")
        parser.add_argument("--database-url")
        parser.add_argument("--media")
        args = parser.parse_args()
        child(args.database_url, args.media, args.child)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250000,1000000")
    parser.add_argument("--prompts", type=int, default=500, help="prompts per T2I model")
    parser.add_argument("--budget", type=int, default=2000, help="labels of the sampling round")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--one-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_size:
        one_size(args.database_url, args.one_size, args.prompts, args.budget)
        return
    print(
        f"prompts per model {args.prompts}, one uniform round of {args.budget} labels, 1,000 bootstrap replicates"
    )
    print("| database | images | estimate_bias | estimate page first / again | notes |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    each_size_in_child(
        __file__,
        args.sizes,
        "--prompts",
        str(args.prompts),
        "--budget",
        str(args.budget),
        "--database-url",
        args.database_url,
    )


if __name__ == "__main__":
    main()
