"""Benchmark (issue 23): the imports and the ground-truth export of a gender study at several sizes.

    .venv/bin/python bench/bench_scale.py --sizes 6000,60000[,250000,1000000] [--database-url URL]

Per size: N tiny PNGs (8x8, distinct) and their manifest are generated in a temporary folder;
the study is created; then each command runs in a child process of its own, as a user runs it
(``import_images``, the same again, ``import_predictions`` of one prediction per image,
``import_labels`` of two labels on 2 % of the items, the same again, ``export_ground_truth``),
and the table gives each one's time, rows/s (time inside the command, without the child's
start-up) and peak RSS (the child's whole process, from ``wait4``). Without --database-url
each size gets a throw-away SQLite database in the temporary folder; with a PostgreSQL URL the
study is named bench-scale-<size>-<pid> and deleted afterwards. MEDIA_ROOT is always temporary.

Targets of the issue: peak RSS <= 400 MB at 1,000,000 rows; import_images >= 3,000 rows/s,
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

ROOT = Path(__file__).resolve().parent.parent
LABELED_SHARE = 0.02  # items with two labels, as in the measurements


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


def _run(env: dict[str, str], *argv: str) -> dict[str, float | bool | str]:
    """Run one manage.py command in a child; its seconds, and its peak RSS in MB."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(list(argv))],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout = process.stdout.read()
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{stdout}\n{stderr}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["rss_mb"] = usage.ru_maxrss / 1024  # kilobytes on Linux
    return result


def _generate(folder: Path, n: int) -> tuple[Path, Path, Path]:
    """N distinct 8x8 PNGs under folder/images, their manifest, predictions and labels files."""
    from PIL import Image as PILImage

    images = folder / "images"
    manifest, predictions, labels = folder / "manifest.csv", folder / "predictions.csv", folder / "labels.csv"
    every = max(1, round(1 / LABELED_SHARE))
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
            name = f"{i // 1000:04d}/{i}.png"
            img.save(images / name, format="PNG")
            word = f"job{i % 50}"
            mw.writerow([name, "sdxl", f"a photo of a {word}", "profession", word, i])
            pw.writerow([name, "bench", "male" if i % 3 else "female"])
            if i % every == 0:
                lw.writerow([name, "bench-a", "male"])
                lw.writerow([name, "bench-b", "male" if i % 4 else "female"])
    return manifest, predictions, labels


def _size(n: int, database_url: str | None) -> list[str]:
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
        ]
        lines = []
        try:
            for label, rows, argv in steps:
                result = _run(env, *argv)
                seconds = float(result["seconds"])
                lines.append(
                    f"| {n:,} | {label} | {rows:,} | {seconds:.1f} s | {rows / seconds:,.0f} | "
                    f"{float(result['rss_mb']):.0f} MB |"
                )
                print(lines[-1], flush=True)
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


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="6000,60000", help="Comma-separated study sizes (images).")
    parser.add_argument("--database-url", default=None, help="Default: a throw-away SQLite file per size.")
    args = parser.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    vendor = (args.database_url or "sqlite").split(":", 1)[0]
    print(f"database: {vendor}")
    print("| images | step | rows | time | rows/s | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    for n in sizes:
        _size(n, args.database_url)


if __name__ == "__main__":
    main()
