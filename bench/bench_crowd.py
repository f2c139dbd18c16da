"""Benchmark: a simulated crowd on one study, over several seeds — the reliability page flags
the random clickers (by gold accuracy and by reliability), excluding the flagged raises the
finals' accuracy, Dawid-Skene beats majority vote, the study stores crowd-kit's result.

    .venv/bin/python bench/bench_crowd.py [--items 600] [--annotators 30] [--random-clickers 5]
        [--labels-per-item 3] [--gold-rate 0.1] [--seeds 1,2,3,4,5]

Per seed, a throw-away database (SQLite in a temporary folder, or Django's test database on the
server of a PostgreSQL DATABASE_URL) gets a gender study of ``--items`` items, ``--gold-rate``
of them gold items (their true answer imported with import_gold's service), the rule 0.8 after
5, majority of ``--labels-per-item``. Careful annotators are right with a probability of their
own (0.85-0.98), random clickers with 0.5. Every annotator labels their next item in turn
through the key press's service (gold items come among the others at the rate) until no work
is left. Printed per seed: whom the page flags by gold accuracy, by reliability as agreement
with the finals (majority, before any model) and by Dawid-Skene's inferred reliability (after
``recompute_finals``), the clickers each finds and the careful annotators each flags wrongly;
the finals' accuracy against the simulation's truth (a dispute counts as wrong) under majority
vote and under Dawid-Skene on the same labels; whether the stored answers and posteriors equal
crowd-kit's own; the accuracy after the annotators flagged once the model ran are excluded and
the others relabel their seats; the invariants. Then the totals over the seeds, with the share
of clickers the gold rule alone catches by the binomial law for the gold answers they gave: at
~6 gold answers each it cannot catch them all, so each mechanism alone is reported, not
checked (docs/how-to/gold-and-exclusion.md#the-gold-rule). Exits 1 when a check fails on a
seed: the page (gold or inferred reliability) missing a clicker, the least reliable by
Dawid-Skene not the clickers, no gain from excluding, Dawid-Skene not beating majority, stored
results not crowd-kit's, a gold answer among labels or finals, an item over N labels.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # a throw-away local run: development mode

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from tests.quality.crowd import crowd_build, crowd_run  # noqa: E402

MIN_ACCURACY, MIN_GOLD = 0.8, 5  # the rule crowd_build sets


def gold_catch_chance(n: int) -> float:
    """The chance that the rule flags a random clicker (right half the time, two answers) who
    gave ``n`` gold answers: fewer than 80 % right, with at least ``MIN_GOLD`` answers."""
    if n < MIN_GOLD:
        return 0.0
    return sum(math.comb(n, k) for k in range(n + 1) if k / n < MIN_ACCURACY) / 2**n


def one_seed(args: argparse.Namespace, seed: int) -> tuple[dict[str, Any], set[str], set[str]]:
    """The figures of one simulated crowd, its random clickers and its careful annotators."""
    settings_dict = connection.settings_dict
    tmp = None
    if connection.vendor == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="bench-crowd-")
        settings_dict.setdefault("TEST", {})["NAME"] = str(Path(tmp.name) / "bench.sqlite3")
    old_name = settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        crowd = crowd_build(
            slug="crowd",
            items=args.items,
            annotators=args.annotators,
            random_clickers=args.random_clickers,
            labels_per_item=args.labels_per_item,
            gold_rate=args.gold_rate,
            seed=seed,
        )
        figures = crowd_run(crowd)
        return figures, crowd.random_clickers, set(crowd.accuracy) - crowd.random_clickers
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        if tmp is not None:
            tmp.cleanup()


def found(flagged: set[str], clickers: set[str], careful: set[str]) -> str:
    return f"{len(flagged & clickers)} of {len(clickers)} clickers, {len(flagged & careful)} careful wrongly"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=600)
    parser.add_argument("--annotators", type=int, default=30)
    parser.add_argument("--random-clickers", type=int, default=5)
    parser.add_argument("--labels-per-item", type=int, default=3)
    parser.add_argument("--gold-rate", type=float, default=0.1)
    parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated seeds, one crowd each")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    setup_test_environment()
    print(
        f"database: {connection.vendor}; {args.annotators} annotators ({args.random_clickers} random), "
        f"{args.items} items, {args.labels_per_item} labels per item, gold rate {args.gold_rate}, "
        f"rule {MIN_ACCURACY} after {MIN_GOLD}; seeds {seeds}"
    )
    totals = {"clickers": 0, "careful": 0, "expected_gold": 0.0}
    caught = {"gold": [0, 0], "reliability": [0, 0], "model": [0, 0], "page": [0, 0]}
    failures: list[str] = []
    try:
        for seed in seeds:
            started = time.perf_counter()
            f, clickers, careful = one_seed(args, seed)
            gold_n = [f["gold_answers"].get(name, 0) for name in sorted(clickers)]
            totals["clickers"] += len(clickers)
            totals["careful"] += len(careful)
            totals["expected_gold"] += sum(gold_catch_chance(n) for n in gold_n)
            for key, flagged in (
                ("gold", f["flagged_gold"]),
                ("reliability", f["flagged_reliability"]),
                ("model", f["flagged_reliability_model"]),
                ("page", f["flagged"]),
            ):
                caught[key][0] += len(flagged & clickers)
                caught[key][1] += len(flagged & careful)
            print(f"\nseed {seed}: {f['submits']} submits ({f['gold_responses']} on gold items)")
            print(f"  random clickers {sorted(clickers)}, their gold answers {gold_n}")
            print(f"  flagged by gold:                         {found(f['flagged_gold'], clickers, careful)}")
            print(
                f"  flagged by reliability (agreement):      {found(f['flagged_reliability'], clickers, careful)}"
            )
            print(
                f"  flagged by reliability (Dawid-Skene):    "
                f"{found(f['flagged_reliability_model'], clickers, careful)}"
            )
            print(f"  flagged on the page after Dawid-Skene:   {found(f['flagged'], clickers, careful)}")
            print(
                f"  finals' accuracy: majority {f['majority_accuracy']:.3f}, Dawid-Skene "
                f"{f['dawid_skene_accuracy']:.3f}, majority after excluding the flagged "
                f"{f['majority_accuracy_after']:.3f} ({f['submits_after']} relabels)"
            )
            print(
                f"  stored equals crowd-kit's: {f['stored_equals_crowdkit']}; gold answers among labels "
                f"or finals: {f['gold_in_labels']}; items over N labels: {f['over_full']}; "
                f"{time.perf_counter() - started:.0f} s"
            )
            checks = {
                "the page flags every random clicker": clickers <= f["flagged"],
                "the least reliable by Dawid-Skene are the random clickers": f["least_reliable"] == clickers,
                "excluding raises the finals' accuracy": f["majority_accuracy_after"]
                > f["majority_accuracy"],
                "Dawid-Skene beats majority vote": f["dawid_skene_accuracy"] > f["majority_accuracy"],
                "the study stores crowd-kit's answers and posteriors": f["stored_equals_crowdkit"],
                "no gold answer in labels or finals": f["gold_in_labels"] == 0,
                "no item over N labels": f["over_full"] == 0,
            }
            failures += [f"seed {seed}: {name}" for name, ok in checks.items() if not ok]
    finally:
        teardown_test_environment()
    n_clickers, n_careful = totals["clickers"], totals["careful"]
    print(f"\nover {len(seeds)} seeds ({n_clickers} random clickers, {n_careful} careful annotators):")
    for key, title in (
        ("gold", "gold rule"),
        ("reliability", "reliability (agreement with the finals)"),
        ("model", "reliability (Dawid-Skene)"),
        ("page", "the page after Dawid-Skene (gold or model)"),
    ):
        clickers_caught, careful_flagged = caught[key]
        print(
            f"  {title:42s} clickers flagged {clickers_caught}/{n_clickers} "
            f"({clickers_caught / n_clickers:.0%}), careful flagged {careful_flagged}/{n_careful} "
            f"({careful_flagged / n_careful:.1%})"
        )
    print(
        f"  the gold rule alone, by the binomial law for the clickers' gold answers: "
        f"{totals['expected_gold']:.1f}/{n_clickers} expected ({totals['expected_gold'] / n_clickers:.0%}): "
        "alone it is reported, not checked"
    )
    for failure in failures:
        print(f"FAIL {failure}")
    print("ok   every check on every seed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
