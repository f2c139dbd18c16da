"""Benchmark: a gender study at several sizes — imports, key press, report, estimate,
export, researcher pages, database size.

    .venv/bin/python bench/bench_scale.py --sizes 6000,60000[,250000,1000000] [--database-url URL]
        [--presses 50] [--skip report,estimate,probe]

Per size: N tiny PNGs (8x8, distinct) and their manifest are generated in a temporary folder;
the study is created; then each command runs in a child process of its own, as a user runs it
(``import_images``, the same again, ``import_predictions`` of one prediction per image,
``import_labels`` of two labels on 2 % of the items, the same again, ``export_ground_truth``,
``bias_report`` and ``estimate_bias`` for the detector), and the table gives each one's time,
rows/s (time inside the command, without the child's start-up) and peak RSS (the child's whole
process, from ``wait4``). Then one more child ("probe") presses ``--presses`` keys as a new
annotator through Django's test client (p50/p95 of the request's wall time, the first 5 left
out, and the median statements per press, BEGIN/COMMIT included), opens the researcher pages
(reports overview, items list, disputes, estimate page; each twice: the first and the second
request's time) and reads the database's size. Without --database-url
each size gets a throw-away SQLite database in the temporary folder; with a PostgreSQL URL the
study is named bench-scale-<size>-<pid> and deleted afterwards. MEDIA_ROOT is always temporary.

Targets: peak RSS <= 400 MB at 1,000,000 rows; import_images >= 3,000 rows/s,
predictions and labels >= 20,000 rows/s; a re-run that changes nothing < 60 s at 1,000,000.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LABELED_SHARE = 0.02  # items with two labels, as in the measurements on the benchmarks page


def _child(argv: list[str]) -> None:
    """In the child: set Django up, run one command, print its seconds as JSON (last line)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    # Measured as in production: with DEBUG on, Django keeps the text of the last 9,000 queries
    # (bulk INSERTs of a big import: tens of MB), which is not the command's memory.
    settings.DEBUG = False
    from django.core.management.base import CommandError

    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    ok = True
    try:
        call_command(*argv, stdout=out, stderr=err)
    except CommandError as exc:  # e.g. a re-run of import_predictions refuses every row
        ok = False
        err.write(str(exc)[:300])
    seconds = time.perf_counter() - started
    print(
        json.dumps({"seconds": seconds, "ok": ok, "out": out.getvalue()[-300:], "err": err.getvalue()[-300:]})
    )


def _probe(slug: str, presses: int) -> None:
    """In the child: key presses of a new annotator, the researcher pages, the database's size
    (printed as JSON, last line)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["*"]
    import statistics

    from bench_keypress_scale import press
    from bench_label_submit import percentile
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.test import Client

    from studies import permissions
    from studies.models import Study
    from tests.factories import UserFactory

    study = Study.objects.get(slug=slug)
    annotator = UserFactory(username=f"kp-{os.getpid()}")
    annotator.groups.add(Group.objects.get_or_create(name=permissions.ANNOTATOR)[0])
    study.annotators.add(annotator)
    times, counts = press(study, annotator, presses)
    result: dict[str, object] = {
        "p50": statistics.median(times),
        "p95": percentile(times, 95),
        "statements": statistics.median(counts),
    }
    researcher = UserFactory(username=f"rs-{os.getpid()}")
    researcher.groups.add(Group.objects.get_or_create(name=permissions.RESEARCHER)[0])
    client = Client()
    client.force_login(researcher)
    pages = {
        "reports": f"/reports/?study={slug}",
        "items": f"/annotate/{slug}/items/",
        "disputes": f"/annotate/{slug}/disputes/",
        "estimate": f"/reports/estimate/?study={slug}&detector=bench",
    }
    for name, url in pages.items():
        seconds = []
        for _ in range(2):
            started = time.perf_counter()
            response = client.get(url)
            seconds.append(time.perf_counter() - started)
        result[name] = (seconds, response.status_code)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_database_size(current_database())")
            result["db_mb"] = cursor.fetchone()[0] / 1e6
    for user in (annotator, researcher):
        study.annotators.remove(user)
    print(json.dumps(result))


def _run(env: dict[str, str], *argv: str) -> dict[str, Any]:
    """Run one manage.py command in a child; its seconds, and its peak RSS in MB."""
    return _spawn(env, ["--child", json.dumps(list(argv))])


def _spawn(env: dict[str, str], args: list[str]) -> dict[str, Any]:
    """Run this script in a child with ``args``: its last line of output (JSON), and the
    child's peak RSS in MB (from wait4: that child's alone)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, __file__, *args], env=env, cwd=ROOT, stdout=out, stderr=err
        )
        # wait4 reaps the child itself: its own peak RSS, not the maximum over all children.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{stdout}\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["rss_mb"] = usage.ru_maxrss / 1024  # kilobytes on Linux
    return result


def _generate(folder: Path, n: int) -> tuple[Path, Path, Path]:
    """N distinct 8x8 PNGs under folder/images, their manifest, predictions and labels files."""
    from PIL import Image as PILImage

    images = folder / "images"
    run = (os.getpid() * 7919 + n) % 16_777_216
    manifest, predictions, labels = folder / "manifest.csv", folder / "predictions.csv", folder / "labels.csv"
    every = max(1, round(1 / LABELED_SHARE))
    hour_ago = time.time() - 3600
    with (
        open(manifest, "w", newline="") as m,
        open(predictions, "w", newline="") as p,
        open(labels, "w", newline="") as lab,
    ):
        mw, pw, lw = csv.writer(m), csv.writer(p), csv.writer(lab)
        mw.writerow(["image", "t2i_model", "prompt", "category", "word", "seed"])
        pw.writerow(["image", "detector", "prediction"])
        lw.writerow(["image", "annotator", "label"])
        for i in range(n):
            sub = images / f"{i // 1000:04d}"
            if i % 1000 == 0:
                sub.mkdir(parents=True)
            img = PILImage.new("RGB", (8, 8), (i % 256, (i // 256) % 256, (i // 65536) % 256))
            # This run's own pixel: images (and their predictions) outlive a deleted study on a
            # shared database, and the same bytes would be the same image as an earlier run's.
            img.putpixel((1, 0), (run % 256, (run // 256) % 256, (run // 65536) % 256))
            name = f"{i // 1000:04d}/{i}.png"
            img.save(images / name, format="PNG")
            # Written an hour "ago", as a real data set is: import_images does not trust the
            # size and mtime of a file modified seconds before its import, and would read
            # every such file again on the re-run (studies.ingest.STAMP_MIN_AGE_NS).
            os.utime(images / name, (hour_ago, hour_ago))
            word = f"job{i % 50}"
            mw.writerow([name, "sdxl", f"a photo of a {word}", "profession", word, i])
            pw.writerow([name, "bench", "male" if i % 3 else "female"])
            if i % every == 0:
                lw.writerow([name, "bench-a", "male"])
                lw.writerow([name, "bench-b", "male" if i % 4 else "female"])
    return manifest, predictions, labels


def _size(n: int, database_url: str | None, presses: int, skip: set[str]) -> list[str]:
    with tempfile.TemporaryDirectory(prefix=f"biaslab-scale-{n}-") as name:
        tmp = Path(name)
        env = dict(os.environ)
        env.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode
        env["BIASLAB_MEDIA_ROOT"] = str(tmp / "media")
        env["DATABASE_URL"] = database_url or f"sqlite:///{tmp / 'bench.sqlite3'}"
        env["PYTHONPATH"] = str(ROOT)
        slug = f"bench-scale-{n}-{os.getpid()}"
        started = time.perf_counter()
        manifest, predictions, labels = _generate(tmp, n)
        generated = time.perf_counter() - started
        _run(env, "migrate", "--verbosity", "0")
        _run(env, "create_study", slug, "--protocol", "gender")
        n_labels = len(labels.read_text().splitlines()) - 1
        steps = [
            (
                "import_images",
                n,
                (
                    "import_images",
                    "--study",
                    slug,
                    "--manifest",
                    str(manifest),
                    "--root",
                    str(tmp / "images"),
                ),
            ),
            (
                "import_images again",
                n,
                (
                    "import_images",
                    "--study",
                    slug,
                    "--manifest",
                    str(manifest),
                    "--root",
                    str(tmp / "images"),
                ),
            ),
            ("import_predictions", n, ("import_predictions", str(predictions), "--study", slug)),
            ("import_labels", n_labels, ("import_labels", str(labels), "--study", slug)),
            ("import_labels again", n_labels, ("import_labels", str(labels), "--study", slug)),
            (
                "export_ground_truth",
                n,
                ("export_ground_truth", "--study", slug, "--output", str(tmp / "gt.csv")),
            ),
            (
                "bias_report",
                n,
                ("bias_report", "--study", slug, "--detector", "bench", "--format", "md"),
            ),
            (
                "estimate_bias",
                n,
                (
                    "estimate_bias",
                    "--study",
                    slug,
                    "--detector",
                    "bench",
                    "--output",
                    str(tmp / "estimate.json"),
                ),
            ),
        ]
        steps = [step for step in steps if step[0].split("_")[-1] not in skip]
        lines = []
        try:
            for label, rows, argv in steps:
                result = _run(env, *argv)
                seconds = float(result["seconds"])
                lines.append(
                    f"| {n:,} | {label} | {rows:,} | {seconds:.1f} s | {rows / seconds:,.0f} | "
                    f"{float(result['rss_mb']):.0f} MB |"
                    + ("" if result["ok"] else f" refused: {str(result['err'])[-160:]!r}")
                )
                print(lines[-1], flush=True)
            if "probe" not in skip:
                probe = _probe_run(env, slug, presses)
                lines.append(
                    f"| {n:,} | key press ({presses}, new annotator) | p50 {probe['p50']:.1f} ms, "
                    f"p95 {probe['p95']:.1f} ms | {probe['statements']:.0f} statements | | "
                    f"{probe['rss_mb']:.0f} MB |"
                )
                print(lines[-1], flush=True)
                for page in ("reports", "items", "disputes", "estimate"):
                    (first, second), status = probe[page]
                    lines.append(
                        f"| {n:,} | page: {page} (HTTP {status}) | first {first:.2f} s, "
                        f"again {second:.2f} s | | | |"
                    )
                    print(lines[-1], flush=True)
                if "db_mb" in probe:
                    print(f"  (PostgreSQL database size {probe['db_mb']:,.0f} MB)", flush=True)
        finally:
            if database_url:
                _run(
                    env,
                    "shell",
                    "-c",
                    f"from studies.models import Study; Study.objects.filter(slug='{slug}').delete()",
                )
        size = ""
        if not database_url:
            size = f", SQLite file {(tmp / 'bench.sqlite3').stat().st_size / 1e6:.0f} MB"
        print(
            f"  ({n:,}: files generated in {generated:.0f} s{size}; {os.getloadavg()[0]:.1f} load average on {os.cpu_count()} CPUs)",
            flush=True,
        )
        return lines


def _probe_run(env: dict[str, str], slug: str, presses: int) -> dict[str, Any]:
    return _spawn(env, ["--probe", slug, str(presses)])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
        return
    if len(sys.argv) > 3 and sys.argv[1] == "--probe":
        _probe(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="6000,60000", help="Comma-separated study sizes (images).")
    parser.add_argument("--database-url", default=None, help="Default: a throw-away SQLite file per size.")
    parser.add_argument("--presses", type=int, default=50, help="Key presses of the probe.")
    parser.add_argument(
        "--skip",
        default="",
        help="Comma-separated steps left out: report, estimate, probe (key press and pages).",
    )
    args = parser.parse_args()
    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    vendor = (args.database_url or "sqlite").split(":", 1)[0]
    print(f"database: {vendor}")
    print("| images | step | rows | time | rows/s | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    for n in sizes:
        _size(n, args.database_url, args.presses, skip)


if __name__ == "__main__":
    main()
