"""Generating a study's images with a diffusers text-to-image pipeline, restartably.

``generation_run`` is the loop behind ``generate_images``: it plans (prompt, index) jobs, skips
those already stored, generates the rest in batches and stores every image through
``annotate.ingest.image_bytes_store`` with its seed and all generation settings in
``Image.params``.

Seeds. Each image's seed is a pure function of (seed base, T2I model name, prompt text, index):
the first 8 bytes of ``sha256("<seed_base>|<t2i_model>|<prompt>|<index>")``, big-endian, shifted
right by one bit (so it fits a signed 64-bit column). The same image therefore gets the same
seed on every machine, in any batch, after any restart. Noise is drawn from a per-image CPU
``torch.Generator`` (diffusers' advice for reproducibility across devices), so batching does not
change an image.

Weights. A short name (``sdxl``, ``sd3``, ``dreamlike``) maps to the paper's checkpoint; any
other name is a diffusers hub id or a local folder. ``BIASLAB_T2I_<NAME>_WEIGHTS`` overrides the
source. Loading never touches the network (``local_files_only=True``, HF_HUB_OFFLINE
semantics): missing weights give one ``GenerationError`` naming that variable.
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import io
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from annotate.models import Image, Study
from detectors.base import DetectorUnavailable
from detectors.progress import Progress

#: The paper's T2I models (Lyu et al. 2025, section 3.1) by short name.
T2I_MODELS: dict[str, str] = {
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "sd3": "stabilityai/stable-diffusion-3-medium-diffusers",
    "dreamlike": "dreamlike-art/dreamlike-photoreal-2.0",
}
PROMPT_SET_DIR = Path(__file__).resolve().parent / "prompt_sets"
PROMPT_COLUMNS = ("category", "word", "prompt")


class GenerationError(Exception):
    """Generation cannot start: bad prompt set, missing weights, bad settings. Message is for the user."""


# --- prompt sets ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptSpec:
    category: str
    word: str
    text: str


def prompt_sets_available() -> list[str]:
    return sorted(p.stem for p in PROMPT_SET_DIR.glob("*.csv"))


def prompt_set_path(name_or_path: str) -> Path:
    """A shipped set by name (``lyu2025``) or the path of any CSV file."""
    shipped = PROMPT_SET_DIR / f"{name_or_path}.csv"
    if "/" not in name_or_path and shipped.is_file():
        return shipped
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    raise GenerationError(
        f"No prompt set {name_or_path!r}: give a shipped set ({', '.join(prompt_sets_available())}) "
        "or the path of a CSV file with columns category, word, prompt."
    )


def prompt_set_load(name_or_path: str) -> list[PromptSpec]:
    """Read and validate a prompt set; every problem is reported with its line number.

    Each (category, word) appears once, since it names the images' folder in ``source_path``.
    """
    path = prompt_set_path(name_or_path)
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
    specs: list[PromptSpec] = []
    errors: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in enumerate(rows, start=2):
        values = {c: (row.get(c) or "").strip() for c in PROMPT_COLUMNS}
        empty = [c for c in PROMPT_COLUMNS if not values[c]]
        if empty:
            errors.append(f"line {line}: empty {', '.join(empty)}")
            continue
        key = (values["category"], values["word"])
        if key in seen:
            errors.append(f"line {line}: {key[0]}/{key[1]} already on line {seen[key]}")
            continue
        seen[key] = line
        specs.append(PromptSpec(values["category"], values["word"], values["prompt"]))
    if errors:
        raise GenerationError(f"{path}: " + "; ".join(errors))
    if not specs:
        raise GenerationError(f"{path}: no prompts")
    return specs


# --- models and seeds ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSource:
    """``name`` is stored as Image.t2i_model; ``source`` is what from_pretrained loads."""

    name: str
    source: str
    env_var: str


def t2i_model_resolve(name: str) -> ModelSource:
    """Short name, hub id or local folder → where to load it from, checked without network."""
    from detectors.weights import resolve_weights, weights_env_var

    path = Path(name).expanduser()
    label = path.name if path.is_dir() else name
    key = f"t2i_{label}"
    env_var = weights_env_var(key)
    default = T2I_MODELS.get(name, str(path.resolve()) if path.is_dir() else name)
    try:
        source = resolve_weights(key, default, config_names=("model_index.json",))
    except DetectorUnavailable as exc:
        raise GenerationError(str(exc)) from None
    return ModelSource(name=label, source=source, env_var=env_var)


def image_seed(*, t2i_model: str, prompt: str, index: int, seed_base: int = 0) -> int:
    """Deterministic 63-bit seed of one image (see the module docstring)."""
    digest = hashlib.sha256(f"{seed_base}|{t2i_model}|{prompt}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _path_part(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text.strip().lower()).strip("_") or "_"


def source_path_for(*, t2i_model: str, category: str, word: str, index: int) -> str:
    """``sdxl/profession/taxi_driver/7.png``: the image's key in exports and manifests."""
    return f"{_path_part(t2i_model)}/{_path_part(category)}/{_path_part(word)}/{index}.png"


# --- planning ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    spec: PromptSpec
    index: int
    seed: int
    source_path: str


def generation_plan(
    *, study: Study, t2i_model: str, prompts: Sequence[PromptSpec], per_prompt: int, seed_base: int = 0
) -> tuple[list[Job], int]:
    """(jobs still to generate, number already stored) — resuming means skipping stored paths."""
    stored = set(Image.objects.filter(study=study, t2i_model=t2i_model).values_list("source_path", flat=True))
    jobs, skipped = [], 0
    for spec in prompts:
        for index in range(per_prompt):
            path = source_path_for(t2i_model=t2i_model, category=spec.category, word=spec.word, index=index)
            if path in stored:
                skipped += 1
                continue
            seed = image_seed(t2i_model=t2i_model, prompt=spec.text, index=index, seed_base=seed_base)
            jobs.append(Job(spec=spec, index=index, seed=seed, source_path=path))
    return jobs, skipped


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


def _call_default(pipe: Any, name: str) -> Any:
    param = inspect.signature(pipe.__call__).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def effective_settings(pipe: Any, settings: Settings) -> dict[str, Any]:
    """The values the pipeline will actually use, for Image.params."""
    steps = settings.steps if settings.steps is not None else _call_default(pipe, "num_inference_steps")
    guidance = settings.guidance if settings.guidance is not None else _call_default(pipe, "guidance_scale")
    return {"steps": steps, "guidance": guidance}


def images_generate(pipe: Any, jobs: Sequence[Job], settings: Settings) -> list[Any]:
    """One batch through the pipeline → PIL images, one per job, in order."""
    import torch

    generators = [torch.Generator(device="cpu").manual_seed(job.seed) for job in jobs]
    kwargs: dict[str, Any] = {}
    if settings.steps is not None:
        kwargs["num_inference_steps"] = settings.steps
    if settings.guidance is not None:
        kwargs["guidance_scale"] = settings.guidance
    if settings.height is not None:
        kwargs["height"] = settings.height
    if settings.width is not None:
        kwargs["width"] = settings.width
    with torch.inference_mode():
        result = pipe(
            prompt=[job.spec.text for job in jobs], generator=generators, output_type="pil", **kwargs
        )
    return list(result.images)


def png_bytes(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


# --- the loop ------------------------------------------------------------------------------------
@dataclass
class GenerationOutcome:
    created: int = 0
    skipped: int = 0
    duplicates: int = 0
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def images_per_second(self) -> float | None:
        return self.created / self.seconds if self.seconds > 0 else None


_DONE = object()


def _put(out: queue.Queue, item: object, abandoned: threading.Event) -> bool:
    """Put unless the consumer has gone away (then give up instead of blocking forever)."""
    while not abandoned.is_set():
        try:
            out.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False


def _produce(
    pipe: Any,
    jobs: Sequence[Job],
    settings: Settings,
    out: queue.Queue,
    should_stop: Callable[[], bool],
    abandoned: threading.Event,
) -> None:
    """Generator thread: run the pipeline batch after batch, hand (batch, images) to the storer.

    Runs beside the main thread so that storing batch k (PNG encoding, hashing, database) overlaps
    generating batch k+1 on the device. Checks the stop flag before each batch; puts ``_DONE``
    at the end, or the exception that ended it.
    """
    try:
        for start in range(0, len(jobs), settings.batch_size):
            if should_stop() or abandoned.is_set():
                break
            batch = jobs[start : start + settings.batch_size]
            if not _put(out, (batch, images_generate(pipe, batch, settings)), abandoned):
                return
        _put(out, _DONE, abandoned)
    except BaseException as exc:  # handed to the main thread, which re-raises it
        _put(out, exc, abandoned)


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
) -> GenerationOutcome:
    """Generate and store every missing image; returns counts. ``pipe`` is loaded when not given.

    A generator thread runs the pipeline (one batch ahead at most) while this thread stores the
    previous batch's images one by one (each store is its own transaction in
    ``image_bytes_store``; a restart re-generates at most the batches in flight). Only this
    thread touches the database. ``should_stop`` is checked before each batch is generated.
    """
    jobs, skipped = generation_plan(
        study=study,
        t2i_model=model.name,
        prompts=prompts,
        per_prompt=per_prompt,
        seed_base=settings.seed_base,
    )
    outcome = GenerationOutcome(skipped=skipped)
    if not jobs:
        return outcome
    if pipe is None:
        pipe = pipeline_load(model, device=settings.device)
    storer = _Storer(study=study, model=model, base_params=_base_params(pipe, model, settings, prompt_set))
    meter = progress(len(jobs)) if progress else None
    results: queue.Queue = queue.Queue(maxsize=1)  # one finished batch waiting at most
    abandoned = threading.Event()
    thread = threading.Thread(
        target=_produce,
        args=(pipe, jobs, settings, results, should_stop, abandoned),
        name="t2i-generate",
        daemon=True,
    )
    started = time.perf_counter()
    thread.start()
    stored_jobs = 0
    try:
        while (item := results.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            batch, images = item
            for job, image in zip(batch, images, strict=True):
                storer.store(job, image, outcome, on_warning)
            stored_jobs += len(batch)
            if meter:
                meter.advance(len(batch))
    finally:
        # On an error (or a second Ctrl-C) the generator thread stops after its current batch
        # by itself; nothing waits for it here.
        abandoned.set()
        outcome.seconds = time.perf_counter() - started
        if meter:
            meter.close()
    outcome.interrupted = stored_jobs < len(jobs)
    return outcome


class _Storer:
    """Stores generated images through ``annotate.ingest`` (main thread only: it uses the database)."""

    def __init__(self, *, study: Study, model: ModelSource, base_params: dict[str, Any]) -> None:
        self.study = study
        self.model = model
        self.base_params = base_params
        self.prompts: dict[PromptSpec, Any] = {}

    def store(
        self, job: Job, image: Any, outcome: GenerationOutcome, on_warning: Callable[[str], None]
    ) -> None:
        from annotate.ingest import DuplicateImage, image_bytes_store, prompt_get_or_create

        spec = job.spec
        if spec not in self.prompts:
            self.prompts[spec] = prompt_get_or_create(
                study=self.study, category=spec.category, word=spec.word, text=spec.text
            )
        params = {**self.base_params, "seed": job.seed, "height": image.height, "width": image.width}
        try:
            _, created = image_bytes_store(
                study=self.study,
                prompt=self.prompts[spec],
                data=png_bytes(image),
                source_path=job.source_path,
                t2i_model=self.model.name,
                seed=job.seed,
                index=job.index,
                params=params,
            )
        except DuplicateImage as exc:
            # Byte-identical output for two seeds (a degenerate model): keep the first.
            outcome.duplicates += 1
            on_warning(f"{job.source_path}: not stored, {exc}")
            return
        outcome.created += int(created)


def _base_params(pipe: Any, model: ModelSource, settings: Settings, prompt_set: str) -> dict[str, Any]:
    import diffusers

    return {
        "t2i_model": model.name,
        "weights": model.source,
        "pipeline": type(pipe).__name__,
        "scheduler": type(getattr(pipe, "scheduler", None)).__name__,
        **effective_settings(pipe, settings),
        "seed_base": settings.seed_base,
        "seed_rule": "sha256(seed_base|t2i_model|prompt|index)[:8] >> 1, CPU torch.Generator",
        "device": settings.device,
        "dtype": "float16" if settings.device.startswith("cuda") else "float32",
        "batch_size": settings.batch_size,
        "prompt_set": prompt_set,
        "diffusers": diffusers.__version__,
    }
