"""Generating a study's images with a diffusers text-to-image pipeline, restartably."""

from __future__ import annotations

import csv
import hashlib
import inspect
import io
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from detectors.base import DetectorUnavailable
from detectors.executors import BatchResult, InlineExecutor, ItemError, WorkerSpec, batches_drive
from studies.progress import Progress
from studies.protocols import protocol_spec

if TYPE_CHECKING:
    # Imported where used, not here: Ray workers import this module for the pipeline functions
    # and must not need Django (generation/workers.py).
    from detectors.executors import Executor, WorkerStats
    from studies.models import Prompt, Study

#: The paper's T2I models (Lyu et al. 2025, section 3.1) by short name.
T2I_MODELS: dict[str, str] = {
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "sd3": "stabilityai/stable-diffusion-3-medium-diffusers",
    "dreamlike": "dreamlike-art/dreamlike-photoreal-2.0",
}
PROMPT_SET_DIR = Path(__file__).resolve().parent / "prompt_sets"
PROMPT_COLUMNS = ("category", "word", "prompt")
#: Seed policies: ``prompt`` hashes the prompt text, ``template`` its ``template`` column.
SEED_POLICIES = ("prompt", "template")
TEMPLATE_COLUMN = "template"


class GenerationError(Exception):
    """Generation cannot start: bad prompt set, missing weights, bad settings. Message is for the user."""


# --- prompt sets ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptSpec:
    """One prompt of a prompt set; ``extra`` holds the set's other columns as (name, value) pairs, in file
    order (a tuple, so the spec stays hashable)."""

    category: str
    word: str
    text: str
    extra: tuple[tuple[str, str], ...] = ()
    folder: str = ""

    @property
    def metadata(self) -> dict[str, str]:
        """The extra columns, stored as the generated items' ``metadata``."""
        return dict(self.extra)


def prompt_sets_available() -> list[str]:
    return sorted(p.stem for p in PROMPT_SET_DIR.glob("*.csv"))


def prompt_folder(text: str) -> str:
    """The sub-folder of a prompt that shares its category and word with others: its lower-cased text
    (at most 48 characters) and the first 8 hex digits of its SHA-256, unique and stable."""
    slug = re.sub(r"\W+", "_", text.strip().lower()).strip("_")[:48].rstrip("_") or "prompt"
    return f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def prompt_set_load(name_or_path: str) -> list[PromptSpec]:
    """Read and validate a prompt set, shipped (by name: ``lyu2025``) or any CSV file (by path); every
    problem is reported with its line number."""
    path = PROMPT_SET_DIR / f"{name_or_path}.csv"
    if "/" in name_or_path or not path.is_file():
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise GenerationError(
                f"No prompt set {name_or_path!r}: give a shipped set ({', '.join(prompt_sets_available())}) "
                "or the path of a CSV file with columns category, word, prompt."
            )
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in reader.fieldnames or []]
            missing = [c for c in PROMPT_COLUMNS if c not in header]
            if missing:
                raise GenerationError(
                    f"{path}: missing column(s) {', '.join(missing)} (need category, word, prompt; "
                    f"found {', '.join(header) or 'nothing'})"
                )
            reader.fieldnames = header
            rows = list(reader)
    except UnicodeDecodeError:
        raise GenerationError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise GenerationError(f"{path}: not a readable CSV ({exc})") from None
    # Unnamed columns (a trailing comma in the header) carry nothing to keep.
    extra_columns = [c for c in dict.fromkeys(header) if c and c not in PROMPT_COLUMNS]
    specs: list[PromptSpec] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for line, row in enumerate(rows, start=2):
        values = {c: (row.get(c) or "").strip() for c in PROMPT_COLUMNS}
        extra = tuple((c, (row.get(c) or "").strip()) for c in extra_columns)
        empty = [c for c in PROMPT_COLUMNS if not values[c]]
        if empty:
            errors.append(f"line {line}: empty {', '.join(empty)}")
            continue
        if values["prompt"] in seen:
            errors.append(
                f"line {line}: prompt {values['prompt']!r} already on line {seen[values['prompt']]}"
            )
            continue
        seen[values["prompt"]] = line
        specs.append(PromptSpec(values["category"], values["word"], values["prompt"], extra))
    if errors:
        raise GenerationError(f"{path}: " + "; ".join(errors))
    if not specs:
        raise GenerationError(f"{path}: no prompts")
    # Decided over the whole file, so a subset (--limit-prompts) keeps every path.
    sharing = Counter((spec.category, spec.word) for spec in specs)
    return [
        replace(spec, folder=prompt_folder(spec.text)) if sharing[(spec.category, spec.word)] > 1 else spec
        for spec in specs
    ]


# --- models and seeds ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSource:
    """``name`` is stored as Item.t2i_model; ``source`` is what from_pretrained loads."""

    name: str
    source: str
    env_var: str


def t2i_model_resolve(name: str, short_names: dict[str, str] = T2I_MODELS) -> ModelSource:
    """Short name (of ``short_names``), hub id or local folder → where to load it from, checked
    without network; GenerationError naming ``BIASLAB_T2I_<NAME>_WEIGHTS`` when not here."""
    from detectors.weights import resolve_weights, weights_env_var

    path = Path(name).expanduser()
    label = path.name if path.is_dir() else name
    key = f"t2i_{label}"
    env_var = weights_env_var(key)
    default = short_names.get(name, str(path.resolve()) if path.is_dir() else name)
    try:
        source = resolve_weights(key, default, config_names=("model_index.json",))
    except DetectorUnavailable as exc:
        raise GenerationError(str(exc)) from None
    return ModelSource(name=label, source=source, env_var=env_var)


def image_seed(*, t2i_model: str, prompt: str, index: int, seed_base: int = 0) -> int:
    """Deterministic 63-bit seed of one image (docs/reference/generation.md, Seeds)."""
    digest = hashlib.sha256(f"{seed_base}|{t2i_model}|{prompt}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def template_seed(*, t2i_model: str, template: str, index: int, seed_base: int = 0) -> int:
    """The seed of image ``index`` of every prompt of ``template`` (policy ``template``). The ``template=``
    prefix keeps it apart from the seed of a prompt whose text happens to equal a template's name."""
    return image_seed(t2i_model=t2i_model, prompt=f"template={template}", index=index, seed_base=seed_base)


def seed_policy_check(prompts: Sequence[PromptSpec], seed_by: str) -> None:
    """Raise GenerationError unless every prompt can be seeded under ``seed_by``: a known policy,
    and for ``template`` a non-empty ``template`` value on every prompt (naming the first few
    prompts without one)."""
    if seed_by not in SEED_POLICIES:
        raise GenerationError(f"seed policy must be one of {', '.join(SEED_POLICIES)}, got {seed_by!r}")
    if seed_by == "template":
        missing = [spec.text for spec in prompts if not spec.metadata.get(TEMPLATE_COLUMN)]
        if missing:
            shown = "; ".join(repr(text) for text in missing[:3])
            raise GenerationError(
                f"--seed-by template needs a {TEMPLATE_COLUMN!r} column with a value on every prompt; "
                f"{len(missing)} prompt(s) have none (e.g. {shown})."
            )


def path_part(text: str) -> str:
    """``text`` as one safe, lower-case path segment."""
    return re.sub(r"[^\w.-]+", "_", text.strip().lower()).strip("_") or "_"


def source_path_for(*, t2i_model: str, category: str, word: str, index: int, folder: str = "") -> str:
    """``sdxl/profession/taxi_driver/7.png``: the generated item's key and its image's source path, the name
    exports and manifests use."""
    prompt_part = f"{path_part(folder)}/" if folder else ""
    return f"{path_part(t2i_model)}/{path_part(category)}/{path_part(word)}/{prompt_part}{index}.png"


# --- planning ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    spec: PromptSpec
    index: int
    seed: int
    source_path: str


def generation_plan(
    *,
    study: Study,
    t2i_model: str,
    prompts: Sequence[PromptSpec],
    per_prompt: int,
    seed_base: int = 0,
    seed_by: str = "prompt",
) -> tuple[list[Job], int]:
    """(jobs still to generate, number already stored) — resuming means skipping the images the study already
    has: same key (the generated path), or same prompt (category, word, text) and index under another path."""
    from studies.models import Item

    seed_policy_check(prompts, seed_by)
    stored_keys: dict[str, int | None] = {}
    stored_prompts: dict[tuple[str, str, str, int | None], int | None] = {}
    for key, seed, index, category, word, text in Item.objects.filter(
        study=study, t2i_model=t2i_model
    ).values_list("key", "seed", "index", "prompt__category", "prompt__word", "prompt__text"):
        stored_keys[key] = seed
        stored_prompts[(category, word, text, index)] = seed
    jobs, skipped, clashes = [], 0, []
    for spec in prompts:
        for index in range(per_prompt):
            path = source_path_for(
                t2i_model=t2i_model, category=spec.category, word=spec.word, index=index, folder=spec.folder
            )
            if seed_by == "template":
                template = spec.metadata[TEMPLATE_COLUMN]
                seed = template_seed(t2i_model=t2i_model, template=template, index=index, seed_base=seed_base)
            else:
                seed = image_seed(t2i_model=t2i_model, prompt=spec.text, index=index, seed_base=seed_base)
            identity = (spec.category, spec.word, spec.text, index)
            if path in stored_keys or identity in stored_prompts:
                stored_seed = stored_keys[path] if path in stored_keys else stored_prompts[identity]
                if stored_seed is not None and stored_seed != seed:
                    clashes.append(f"{path} (stored seed {stored_seed}, planned {seed})")
                skipped += 1
                continue
            jobs.append(Job(spec=spec, index=index, seed=seed, source_path=path))
    if clashes:
        raise GenerationError(
            f"{len(clashes)} image(s) of {t2i_model} already in study {study.slug} have other seeds than "
            f"planned, e.g. {clashes[0]}: they were made with another --seed-by or --seed-base (see "
            "their Item.params), or their prompt's text changed. Run again with the settings they were "
            "made with, or generate into another study."
        )
    return jobs, skipped


def prompts_check(*, study: Study, prompts: Sequence[PromptSpec]) -> None:
    """Raise GenerationError, before anything is generated, naming the first prompt whose item would ask a
    question the study does not have (``ProtocolSpec.item_question_keys``) or whose metadata the study's
    protocol refuses (``ProtocolSpec.validate_metadata``, the check ``import_images`` makes per row)."""
    from studies.models import Question

    spec_of_protocol = protocol_spec(study.protocol)
    known = set(Question.objects.filter(study=study).values_list("key", flat=True))
    for spec in prompts:
        unknown = [key for key in spec_of_protocol.item_question_keys(spec.metadata) if key not in known]
        if unknown:
            raise GenerationError(
                f"prompt {spec.text!r} would ask question {unknown[0]!r}, which study {study.slug} does "
                f"not have (its questions: {', '.join(sorted(known)) or 'none'})."
            )
    for spec in prompts:
        problem = spec_of_protocol.validate_metadata(spec.metadata)
        if problem:
            raise GenerationError(
                f"prompt {spec.text!r}: {problem} (study {study.slug}, {study.protocol} protocol)."
            )


# --- the pipeline --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    device: str = "cpu"
    batch_size: int = 1
    steps: int | None = None  # None: the pipeline's default, recorded as the value used
    guidance: float | None = None
    height: int | None = None
    width: int | None = None
    seed_base: int = 0
    seed_by: str = "prompt"  # one of SEED_POLICIES


def pipeline_load(model: ModelSource, *, device: str) -> Any:
    """The diffusers pipeline on ``device``: fp16 on CUDA, fp32 elsewhere; never downloads."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from diffusers import DiffusionPipeline

    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    try:
        pipe = DiffusionPipeline.from_pretrained(model.source, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise GenerationError(
            f"Cannot load T2I model {model.name!r} from {model.source}: {exc}. "
            f"Set {model.env_var} to a local diffusers folder."
        ) from None
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call_default(pipe: Any, name: str, given: Any = None) -> Any:
    """``given``, else the default of the pipeline's ``name`` argument (None when it has none)."""
    if given is not None:
        return given
    param = inspect.signature(pipe.__call__).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def pipeline_info(pipe: Any, settings: Settings | None = None, **used: Any) -> dict[str, Any]:
    """What the pipeline is and the settings it will use (``used``, else a ``Settings``' steps and guidance),
    for every item's ``params``; a Ray worker returns it from ``load()``."""
    import diffusers

    if settings is not None:
        used = {
            "steps": call_default(pipe, "num_inference_steps", settings.steps),
            "guidance": call_default(pipe, "guidance_scale", settings.guidance),
        }
    return {
        "pipeline": type(pipe).__name__,
        "scheduler": type(getattr(pipe, "scheduler", None)).__name__,
        **used,
        "diffusers": diffusers.__version__,
    }


def pipeline_run(
    pipe: Any, *, prompts: Sequence[str], seeds: Sequence[int], options: dict[str, Any], **inputs: Any
) -> Any:
    """One batch through a diffusers pipeline → its result (PIL images)."""
    import torch

    generators = [torch.Generator(device="cpu").manual_seed(seed) for seed in seeds]
    kwargs = {name: value for name, value in options.items() if value is not None}
    with torch.inference_mode():
        return pipe(prompt=list(prompts), generator=generators, output_type="pil", **inputs, **kwargs)


def images_generate(pipe: Any, jobs: Sequence[Job], settings: Settings) -> list[Any]:
    """One batch through the pipeline → PIL images, one per job, in order."""
    options = {
        "num_inference_steps": settings.steps,
        "guidance_scale": settings.guidance,
        "height": settings.height,
        "width": settings.width,
    }
    result = pipeline_run(
        pipe, prompts=[job.spec.text for job in jobs], seeds=[job.seed for job in jobs], options=options
    )
    return list(result.images)


@dataclass(frozen=True)
class Generated:
    """One generated or edited image as PNG bytes (encoded where it was made: less to send), its
    size, and the safety checker's flag (``None`` for a pipeline without one)."""

    png: bytes
    width: int
    height: int
    nsfw: bool | None = None

    @classmethod
    def of(cls, image: Any, nsfw: Any = None) -> Generated:
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return cls(buf.getvalue(), image.width, image.height, None if nsfw is None else bool(nsfw))


def pipeline_worker_spec(worker: str, model: ModelSource, settings: Any) -> WorkerSpec:
    """How a worker of ``generation/workers.py`` loads its pipeline: the model's source and the settings (a
    ``Settings`` or an ``EditSettings``), as plain data."""
    return WorkerSpec(
        factory=f"generation.workers.{worker}",
        kwargs={"model": asdict(model), "settings": asdict(settings)},
        label=model.name,
    )


# --- the loop ------------------------------------------------------------------------------------
@dataclass
class GenerationOutcome:
    created: int = 0
    skipped: int = 0
    duplicates: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    #: Per-worker figures of an ``--executor ray`` run (empty for a local run).
    workers: list[WorkerStats] = field(default_factory=list)

    @property
    def images_per_second(self) -> float | None:
        return self.created / self.seconds if self.seconds > 0 else None


def batches_run(
    executor: Executor | None,
    spec: WorkerSpec,
    jobs: Sequence[Any],
    outcome: GenerationOutcome,
    *,
    storer: Callable[[dict[str, Any]], Callable[[Any, Any], None]],
    failed: Callable[[Any, ItemError], None],
    batch_size: int,
    pipe: Any = None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], Progress] | None = None,
    payload: Callable[[Any], Any] = lambda job: job,
) -> GenerationOutcome:
    """Start ``executor`` (else an ``InlineExecutor`` using ``pipe`` when given) on ``spec``, run ``jobs`` on
    it and store each output here with ``storer(what the workers loaded)``; an item the worker could not make
    goes to ``failed``."""
    with (
        nullcontext(executor)
        if executor is not None
        else InlineExecutor(background=True, pipe=pipe) as runner
    ):
        store = storer(runner.start(spec))
        meter = progress(len(jobs)) if progress else None
        size = max(1, batch_size)
        batches = (
            [(index, payload(jobs[index])) for index in range(start, min(start + size, len(jobs)))]
            for start in range(0, len(jobs), size)
        )
        handled = 0

        def on_result(result: BatchResult) -> None:
            nonlocal handled
            for index, output in zip(result.keys, result.outputs, strict=True):
                # cast: an executor hands back the keys it was given, here job indexes (``batches``).
                job = jobs[cast(int, index)]
                if isinstance(output, ItemError):
                    failed(job, output)
                else:
                    store(job, output)
            handled += len(result.keys)
            if meter:
                meter.advance(len(result.keys))

        started = time.perf_counter()
        try:
            batches_drive(runner, batches, on_result, should_stop=should_stop)
        finally:
            outcome.workers = runner.stats()
            if meter:
                meter.close()
    outcome.seconds = time.perf_counter() - started
    outcome.interrupted = handled < len(jobs)
    return outcome


def generation_run(
    *,
    study: Study,
    model: ModelSource,
    prompts: Sequence[PromptSpec],
    per_prompt: int,
    settings: Settings,
    prompt_set: str = "",
    pipe: Any = None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], Progress] | None = None,
    on_warning: Callable[[str], None] = lambda message: None,
    executor: Executor | None = None,
) -> GenerationOutcome:
    """Generate and store every missing image; returns counts. ``pipe`` is loaded when not given."""
    prompts_check(study=study, prompts=prompts)
    jobs, skipped = generation_plan(
        study=study,
        t2i_model=model.name,
        prompts=prompts,
        per_prompt=per_prompt,
        seed_base=settings.seed_base,
        seed_by=settings.seed_by,
    )
    outcome = GenerationOutcome(skipped=skipped)
    if not jobs:
        return outcome

    def storer(info: dict[str, Any]) -> Callable[[Job, Any], None]:
        from studies.imports.images import item_image_store
        from studies.imports.manifest_rows import DuplicateImage

        rule = _SEED_RULES[settings.seed_by]
        params = run_params(
            "t2i_model", info, model, settings, prompt_set, seed_by=settings.seed_by, seed_rule=rule
        )
        prompt = prompt_cache(study)

        def store(job: Job, output: Any) -> None:
            spec = job.spec
            try:
                # One item per image, keyed by its path, with one ItemImage (role image); the file is
                # stored once by content hash, so the same seed in another study reuses it.
                _, created = item_image_store(
                    study=study,
                    data=output.png,
                    key=job.source_path,
                    prompt=prompt(spec.category, spec.word, spec.text),
                    t2i_model=model.name,
                    seed=job.seed,
                    index=job.index,
                    params={**params, "seed": job.seed, "height": output.height, "width": output.width},
                    metadata=spec.metadata,
                )
            except DuplicateImage as exc:
                # Byte-identical output for two seeds (a degenerate model): keep the first.
                outcome.duplicates += 1
                on_warning(f"{job.source_path}: not stored, {exc}")
                return
            outcome.created += int(created)

        return store

    return batches_run(
        executor,
        pipeline_worker_spec("GenerationWorker", model, settings),
        jobs,
        outcome,
        storer=storer,
        failed=lambda job, error: on_warning(
            f"{job.source_path}: not generated, {error.message}; a re-run retries it"
        ),
        batch_size=settings.batch_size,
        pipe=pipe,
        should_stop=should_stop,
        progress=progress,
    )


def prompt_cache(study: Study) -> Callable[[str, str, str], Prompt]:
    """``prompt_get_or_create(category, word, text)`` in ``study``, each prompt read once (main thread only:
    it uses the database)."""
    from studies.imports.images import prompt_get_or_create

    @cache
    def prompt(category: str, word: str, text: str) -> Prompt:
        return prompt_get_or_create(study=study, category=category, word=word, text=text)

    return prompt


_SEED_RULES = {
    "prompt": "sha256(seed_base|t2i_model|prompt|index)[:8] >> 1, CPU torch.Generator",
    "template": "sha256(seed_base|t2i_model|template=<template>|index)[:8] >> 1, CPU torch.Generator",
}


def run_params(
    name_key: str, info: dict[str, Any], model: ModelSource, settings: Any, prompt_set: str, **extra: Any
) -> dict[str, Any]:
    """Every item's ``params`` but its seed and size: the model under ``name_key``, what the pipeline is and
    the settings it uses (``info``, from this process's pipeline or the workers'), ``extra`` and the run's
    settings (a ``Settings`` or an ``EditSettings``)."""
    return {
        name_key: model.name,
        "weights": model.source,
        **info,
        **extra,
        "seed_base": settings.seed_base,
        "device": settings.device,
        "dtype": "float16" if settings.device.startswith("cuda") else "float32",
        "batch_size": settings.batch_size,
        "prompt_set": prompt_set,
    }
