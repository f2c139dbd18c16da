"""Generate a study's images from a prompt set with a diffusers text-to-image model."""

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
    stoppable_run,
)
from generation.generation import (
    SEED_POLICIES,
    T2I_MODELS,
    GenerationError,
    Settings,
    generation_run,
    prompt_set_load,
    seed_policy_check,
    t2i_model_resolve,
)
from studies.commands import add_study_argument, study_from_options


class Command(BaseCommand):
    help = "Generate images for every prompt of a prompt set and store them as the study's images."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--t2i-model",
            required=True,
            help=f"Short name ({', '.join(T2I_MODELS)}), a diffusers hub id or a local folder.",
        )
        parser.add_argument(
            "--prompt-set",
            required=True,
            help="Shipped set name (lyu2025) or CSV path (columns category, word, prompt; others become "
            "item metadata).",
        )
        parser.add_argument("--per-prompt", type=int, default=20, help="Images per prompt (default 20).")
        add_study_argument(parser)
        parser.add_argument("--steps", type=int, default=None, help="Default: the pipeline's own.")
        parser.add_argument("--guidance", type=float, default=None, help="Default: the pipeline's own.")
        parser.add_argument("--height", type=int, default=None)
        parser.add_argument("--width", type=int, default=None)
        parser.add_argument("--seed-base", type=int, default=0, help="Mixed into every seed (default 0).")
        parser.add_argument(
            "--seed-by",
            choices=SEED_POLICIES,
            default="prompt",
            help="What each image's seed is derived from with its index: the prompt text (default), or the "
            "prompt set's template column, so every prompt of a template shares its seeds (man/woman pairs).",
        )
        parser.add_argument("--limit-prompts", type=int, default=None, help="Only the first K prompts.")
        pipeline_arguments(parser)

    def handle(self, *args: Any, **opts: Any) -> None:
        positive(opts, "per_prompt", "batch_size", "steps", "height", "width", "limit_prompts")
        executor = executor_for(opts, stderr=self.stderr)
        study = study_from_options(opts)
        try:
            prompts = prompt_set_load(opts["prompt_set"])
            if opts["limit_prompts"]:
                prompts = prompts[: opts["limit_prompts"]]
            # The prompt set's faults before the weights': both are the user's to fix, this one first.
            seed_policy_check(prompts, opts["seed_by"])
            model = t2i_model_resolve(opts["t2i_model"])
        except GenerationError as exc:
            raise CommandError(str(exc)) from None
        settings = run_settings(Settings, opts)
        outcome = stoppable_run(
            generation_run,
            executor=executor,
            stderr=self.stderr,
            errors=(GenerationError, ExecutorError),
            study=study,
            model=model,
            prompts=prompts,
            per_prompt=opts["per_prompt"],
            settings=settings,
            prompt_set=opts["prompt_set"],
            on_warning=lambda message: self.stderr.write(message),
        )
        name = model.name
        outcome_report(
            self.stdout,
            outcome,
            nothing=f"all {outcome.skipped} images of {name} are already in study {study.slug}.",
            done=f"{outcome.created} images of {name} stored in study {study.slug}, {outcome.skipped} already "
            f"there, {outcome.duplicates} duplicates not stored",
        )
