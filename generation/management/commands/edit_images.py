"""Edit seed photos with every prompt of a prompt set (BiasPainter) into a pair-change study."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detectors.executors import ExecutorError
from detectors.management.options import (
    executor_for,
    outcome_report,
    pipeline_arguments,
    positive,
    run_settings,
    shard_option,
    stoppable_run,
)
from generation.edit_pipeline import EDITORS, MITIGATION_SUFFIX, EditSettings, editor_resolve
from generation.editing import edit_run, seeds_from_folder, seeds_from_study, study_check
from generation.generation import GenerationError, prompt_set_load
from studies.commands import add_study_argument, study_from_options


class Command(BaseCommand):
    help = "Edit seed photos with every prompt of a prompt set and store (seed, edit) pairs in a study."

    def add_arguments(self, parser: CommandParser) -> None:
        add_study_argument(parser, note="The pair-change study the pairs go to.")
        seeds = parser.add_mutually_exclusive_group(required=True)
        seeds.add_argument("--seeds-study", default="", help="Slug of the study holding the seed photos.")
        seeds.add_argument(
            "--seeds", default="", metavar="DIR", help="Folder of seed photos (optional DIR/seeds.csv)."
        )
        parser.add_argument(
            "--prompt-set",
            required=True,
            help="Shipped set name (biaspainter2024) or CSV path (columns category, word, prompt).",
        )
        parser.add_argument(
            "--editor",
            required=True,
            help=f"Short name ({', '.join(EDITORS)}), a diffusers hub id or a local folder.",
        )
        parser.add_argument(
            "--prompt-suffix",
            default="",
            help=f"Appended to every prompt, e.g. the paper's mitigation {MITIGATION_SUFFIX!r}.",
        )
        parser.add_argument("--steps", type=int, default=None, help="Default: the editor's own.")
        parser.add_argument("--guidance", type=float, default=None, help="Default: the editor's own.")
        parser.add_argument("--strength", type=float, default=None, help="img2img only (0-1].")
        parser.add_argument("--image-guidance", type=float, default=None, help="InstructPix2Pix only.")
        parser.add_argument("--size", type=int, default=None, help="Seed side in pixels (default: native).")
        parser.add_argument("--seed-base", type=int, default=0, help="Mixed into every seed (default 0).")
        parser.add_argument("--per-pair", type=int, default=1, help="Edits per (seed, prompt) (default 1).")
        parser.add_argument("--shard", default="", help="i/n: this worker's share (1-based i).")
        parser.add_argument("--limit-prompts", type=int, default=None, help="Only the first K prompts.")
        pipeline_arguments(parser, send_images=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        positive(opts, "batch_size", "steps", "size", "per_pair", "limit_prompts")
        positive(opts, "guidance", "image_guidance", integer=False)
        if opts["strength"] is not None and not 0 < opts["strength"] <= 1:
            raise CommandError("--strength must be in (0, 1]")
        shard = shard_option(opts)
        # Before any seed is imported: without Ray, or with contradictory options, nothing is written.
        executor = executor_for(opts, stderr=self.stderr)
        study = study_from_options(opts)
        seeds_study = study_from_options(opts, "seeds_study") if opts["seeds_study"] else None
        try:
            study_check(study, seeds_study=seeds_study)
            prompts = prompt_set_load(opts["prompt_set"])
            model = editor_resolve(opts["editor"])
            if seeds_study is not None:
                seeds, seeds_source = seeds_from_study(seeds_study), f"study:{seeds_study.slug}"
            else:
                seeds, seeds_source = seeds_from_folder(opts["seeds"]), f"folder:{opts['seeds']}"
        except GenerationError as exc:  # EditingError included
            raise CommandError(str(exc)) from None
        if opts["limit_prompts"]:
            prompts = prompts[: opts["limit_prompts"]]
        settings = run_settings(EditSettings, opts)
        outcome = stoppable_run(
            edit_run,
            executor=executor,
            stderr=self.stderr,
            errors=(GenerationError, ExecutorError),  # EditingError included
            label="pairs",
            study=study,
            model=model,
            seeds=seeds,
            prompts=prompts,
            settings=settings,
            prompt_set=opts["prompt_set"],
            seeds_source=seeds_source,
            shard=(shard.index, shard.count) if shard else None,
            on_warning=lambda message: self.stderr.write(message),
            send_images=opts["send_images"],
        )
        where = f" (shard {shard})" if shard else ""
        outcome_report(
            self.stdout,
            outcome,
            nothing=f"all {outcome.skipped} pairs of {model.name}{where} are already in study {study.slug}.",
            done=f"{outcome.created} pairs of {model.name}{where} stored in study {study.slug} "
            f"({len(seeds)} seeds x {len(prompts)} prompts x {settings.per_pair}), "
            f"{outcome.skipped} already there",
            label="pairs",
        )
