"""Draw pairs of a pair-change study for people to check, stratified by automatic verdict.

python manage.py sample_pairs --study bp-sd15 --attribute age [--buckets older=25,...]"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from metrics.pair_change import ATTRIBUTES, PairChangeInputError
from protocols.pair_change.sampling import MeasureSourceError, SamplingError, pairs_sample, parse_buckets
from studies.commands import add_study_argument, study_from_options


class Command(BaseCommand):
    help = (
        "Draw a stratified random sample of a pair-change study's pairs by their automatic verdict "
        "on one attribute (default: the paper's 25/25/50) and queue them for labelling. Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(parser, note="A pair-change study.")
        parser.add_argument("--attribute", required=True, choices=ATTRIBUTES, help="age, gender or skin.")
        parser.add_argument(
            "--buckets",
            default="",
            help="Pairs per bucket, e.g. older=25,younger=25,unchanged=50 (age), lighter=…,darker=…,"
            "unchanged=… (skin), male_to_female=…,female_to_male=…,unchanged=… (gender). Default: "
            "the paper's 25/25/50.",
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the draw (default 0).")
        parser.add_argument("--t2i-model", default="", help="Only pairs of this editing model.")
        parser.add_argument(
            "--measure",
            default="",
            help="The detector measuring the attribute when several do, e.g. age=face_age_gender.",
        )
        parser.add_argument(
            "--take-all-if-short",
            action="store_true",
            help="Take a whole bucket that holds fewer pairs than asked (default: refuse).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Show the draw; write nothing.")

    def handle(self, *args: Any, **opts: Any) -> None:
        study = study_from_options(opts)
        attribute = opts["attribute"]
        try:
            draw = pairs_sample(
                study=study,
                attribute=attribute,
                sizes=parse_buckets(attribute, opts["buckets"]),
                seed=opts["seed"],
                t2i_model=opts["t2i_model"] or None,
                measure=opts["measure"] or None,
                take_all_if_short=opts["take_all_if_short"],
                dry_run=opts["dry_run"],
            )
        except (SamplingError, MeasureSourceError, PairChangeInputError) as exc:
            raise CommandError(str(exc)) from None
        record = draw.record
        chosen = Counter(entry["bucket"] for entry in record["items"])
        counts = ", ".join(f"{bucket} {chosen.get(bucket, 0)}" for bucket in record["buckets"])
        source = f"{record['source']['detector']}@{record['source']['version']}"
        if not draw.created and not opts["dry_run"]:
            self.stdout.write(
                f"This draw ({attribute}, seed {record['seed']}) was made on {record['drawn_at']}: "
                f"{len(record['items'])} pair(s) ({counts}); nothing changed."
            )
            return
        pool = ", ".join(f"{bucket} {draw.eligible.get(bucket, 0)}" for bucket in record["buckets"])
        verb = "Would draw" if opts["dry_run"] else "Drew"
        self.stdout.write(
            f"{verb} {len(record['items'])} pair(s) for {attribute} ({counts}) measured by {source}, "
            f"seed {record['seed']}, from a pool of {pool}; {draw.n_without_verdict} pair(s) without "
            f"a clear verdict, {draw.n_skipped} drawn before or labelled already."
        )
        if record["shortfall"]:
            short = ", ".join(f"{bucket} {n} short" for bucket, n in record["shortfall"].items())
            self.stderr.write(f"Took every pair of the buckets that fell short: {short}.")
        if not opts["dry_run"]:
            self.stdout.write(f"Queued {draw.n_queued} pair(s) for labelling in study '{study.slug}'.")
