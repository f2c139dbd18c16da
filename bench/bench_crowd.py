"""Benchmark: a simulated crowd on one study — gold flags the random clickers, excluding them
raises the finals' accuracy, Dawid-Skene beats majority vote, the study stores crowd-kit's result.

    .venv/bin/python bench/bench_crowd.py [--items 600] [--annotators 30] [--random-clickers 5]
        [--labels-per-item 3] [--gold-rate 0.1] [--seed 1]

A throw-away database (SQLite in a temporary folder, or Django's test database on the server of
a PostgreSQL DATABASE_URL) gets a gender study of ``--items`` items, ``--gold-rate`` of them gold
items (their true answer imported with import_gold's service), the gold rule 0.8 after 5 gold
answers, majority of ``--labels-per-item``. Careful annotators are right with a probability of
their own (0.85-0.98), random clickers with 0.5. Every annotator labels their next item in turn
through the key press's service (gold items come among the others at the rate) until no work
is left. Printed: the annotators the gold rule flags against the random clickers, the finals'
accuracy against the simulation's truth (a dispute counts as wrong) under majority vote and
under Dawid-Skene on the same labels, whether the final answers and posteriors stored equal
crowd-kit's own on those labels, the 5 least reliable by Dawid-Skene, the accuracy after the
flagged are excluded and the others relabel their seats, and the invariants (no gold item has
a label or a final label; no item more than N labels). Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from tests.quality.crowd import crowd_build, crowd_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--annotators", type=int, default=30)
    parser.add_argument("--random-clickers", type=int, default=5)
    parser.add_argument("--labels-per-item", type=int, default=3)
    parser.add_argument("--gold-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    setup_test_environment()
    settings_dict = connection.settings_dict
    tmp = None
    if connection.vendor == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="bench-crowd-")
        settings_dict.setdefault("TEST", {})["NAME"] = str(Path(tmp.name) / "bench.sqlite3")
    old_name = settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        started = time.perf_counter()
        crowd = crowd_build(
            slug="crowd",
            items=args.items,
            annotators=args.annotators,
            random_clickers=args.random_clickers,
            labels_per_item=args.labels_per_item,
            gold_rate=args.gold_rate,
            seed=args.seed,
        )
        f = crowd_run(crowd)
        clickers = crowd.random_clickers
        print(
            f"database: {connection.vendor}; {args.annotators} annotators ({len(clickers)} random), "
            f"{args.items} items, {args.labels_per_item} labels per item, gold rate {args.gold_rate}"
        )
        print(
            f"submits: {f['submits']} ({f['gold_responses']} on gold items) in {f['seconds_labelling']:.1f} s"
        )
        print(f"random clickers:      {sorted(clickers)}")
        print(
            f"flagged by gold:      {sorted(f['flagged'])} "
            f"({len(f['flagged'] & clickers)} of {len(clickers)} clickers, {len(f['flagged'] - clickers)} others)"
        )
        print(f"least reliable (DS):  {sorted(f['least_reliable'])}")
        print(f"finals' accuracy, majority vote:            {f['majority_accuracy']:.3f}")
        print(
            f"finals' accuracy, Dawid-Skene (same labels): {f['dawid_skene_accuracy']:.3f} "
            f"({f['seconds_dawid_skene']:.1f} s)"
        )
        print(f"stored finals and posteriors equal crowd-kit's: {f['stored_equals_crowdkit']}")
        print(
            f"finals' accuracy after excluding the flagged ({f['submits_after']} relabels): "
            f"{f['majority_accuracy_after']:.3f}"
        )
        print(
            f"gold answers among labels or finals: {f['gold_in_labels']}; items over N labels: {f['over_full']}"
        )
        print(f"total {time.perf_counter() - started:.1f} s")
        checks = {
            "gold flags every random clicker": clickers <= f["flagged"],
            "the least reliable are the random clickers": f["least_reliable"] == clickers,
            "excluding raises the finals' accuracy": f["majority_accuracy_after"] > f["majority_accuracy"],
            "Dawid-Skene beats majority vote": f["dawid_skene_accuracy"] > f["majority_accuracy"],
            "the study stores crowd-kit's answers and posteriors": f["stored_equals_crowdkit"],
            "no gold answer in labels or finals": f["gold_in_labels"] == 0,
            "no item over N labels": f["over_full"] == 0,
        }
        for name, ok in checks.items():
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
        return 0 if all(checks.values()) else 1
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        teardown_test_environment()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
