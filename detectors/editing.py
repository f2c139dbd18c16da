"""Editing seed photos with a diffusers image-to-image pipeline, restartably (BiasPainter).

``edit_run`` is the loop behind ``edit_images``: Wang et al. 2024 (section 3.3) give every seed
photo of a person to an editing model with every gender-, age- and race-neutral prompt ("a person
who is a lawyer") and compare the output with the seed. Each output becomes an ``Item`` of a
pair-change study with two images: role ``input`` (the seed photo, one ``Image`` row shared by
all its pairs, so it is measured once) and role ``output`` (the edit), its prompt, the editor's
name as ``t2i_model``, the noise seed, every setting in ``Item.params`` and, in
``Item.metadata``, the prompt set's extra columns (``domain``), the seed's ``seed_gender`` /
``seed_race`` / ``seed_age_group`` and ``seed_key``.

Editors. ``sd15``, ``sd21``, ``sdxl`` and ``instruct-pix2pix`` name the paper's checkpoints
(``EDITORS``); any other name is a diffusers hub id or a local folder. ``BIASLAB_T2I_<NAME>_WEIGHTS``
overrides the source (``BIASLAB_T2I_SD15_WEIGHTS``, ``BIASLAB_T2I_INSTRUCT_PIX2PIX_WEIGHTS``).
Loading never touches the network; missing weights give one ``EditingError`` naming the
variable. An InstructPix2Pix checkpoint runs as ``StableDiffusionInstructPix2PixPipeline``
(``strength`` does not apply; ``image_guidance`` does); any other Stable Diffusion checkpoint,
text-to-image or not, runs as its image-to-image pipeline (``StableDiffusionImg2ImgPipeline``,
``StableDiffusionXLImg2ImgPipeline``; ``image_guidance`` does not apply). Unset settings take
the pipeline's own defaults (the paper kept each service's defaults), and the values used are
recorded on every output, ``null`` where a setting does not apply.

Inputs. A seed photo is centre-cropped to a square and resized to ``size`` (the editor's
native size: 512 for sd15 and instruct-pix2pix, 768 for sd21, 1024 for sdxl, else 512) before
editing; the ``input`` image stored with the pair is the seed file itself.

Seeds. The noise seed of an edit is the first 8 bytes of
``sha256("edit|<seed_base>|<editor>|<prompt>|<seed photo sha256>|<index>")``, big-endian, shifted
right by one bit, with the prompt *without* ``--prompt-suffix``: the paper's mitigation run
(``", maintain the same gender as the input image"``) then starts from the same noise as the
original run and differs only by the suffix. Noise comes from a per-image CPU
``torch.Generator``, as in ``detectors.generation``.

Keys. ``<editor>/<category>/<word>/[<prompt folder>/]<seed>/<index>.png``; with a suffix the
first part is ``<editor>+suffix-<sha256(suffix)[:8]>`` so both runs can share a study. Resuming
skips the keys the study already has; ``shard=(i, n)`` keeps the jobs whose key hashes to
``i - 1`` modulo ``n``, so n workers cover every pair once.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detectors.base import DetectorUnavailable
from detectors.generation import (
    GenerationError,
    GenerationOutcome,
    ModelSource,
    PromptSpec,
    batches_run,
    pipeline_load,
    png_bytes,
)
from detectors.progress import Progress
from studies.ingest import (
    ImageRejected,
    InvalidManifestRow,
    PathOutsideRoot,
    image_file_get_or_create,
    image_file_validate,
    item_image_store,
    manifest_path_resolve,
    prompt_get_or_create,
)
from studies.models import Image, ImageRole, Item, ItemImage, Prompt, Study
from studies.protocols import protocol_spec

#: The paper's editing models (Wang et al. 2024, section 4.1) by short name.
EDITORS: dict[str, str] = {
    "sd15": "stable-diffusion-v1-5/stable-diffusion-v1-5",
    "sd21": "stabilityai/stable-diffusion-2-1",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "instruct-pix2pix": "timbrooks/instruct-pix2pix",
}
#: The resolution each was trained at; seeds are resized to it.
NATIVE_SIZES: dict[str, int] = {"sd15": 512, "sd21": 768, "sdxl": 1024, "instruct-pix2pix": 512}
DEFAULT_SIZE = 512
#: Section 4.4's mitigation prompt ("Miti"), for ``--prompt-suffix``.
MITIGATION_SUFFIX = ", maintain the same gender as the input image"
#: Seed-photo attributes copied into every pair's metadata (as ``seed_<name>``).
SEED_ATTRIBUTES = ("gender", "race", "age_group")
#: A seeds folder may describe its photos in this CSV (column ``image`` + seed attributes).
SEED_MANIFEST = "seeds.csv"
SEED_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")

IMG2IMG = "img2img"
PIX2PIX = "instruct-pix2pix"
SEED_RULE = (
    "sha256(edit|seed_base|editor|prompt without suffix|seed sha256|index)[:8] >> 1, CPU torch.Generator"
)


class EditingError(GenerationError):
    """Editing cannot start: bad seeds, study, prompt set, weights or settings. Message is for the user."""


# --- seeds ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeedPhoto:
    """A seed photo: its stored ``Image`` row, a name for keys (``seed_key``) and the metadata
    it gives every pair (``seed_gender`` …)."""

    image: Image
    name: str
    metadata: Mapping[str, str] = field(default_factory=dict)


def seed_metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """``seed_gender`` / ``seed_race`` / ``seed_age_group`` from a seed's metadata or manifest
    row, given either under those names or as ``gender`` / ``race`` / ``age_group``; empty
    values are left out."""
    out: dict[str, str] = {}
    for name in SEED_ATTRIBUTES:
        value = values.get(f"seed_{name}")
        if value in (None, ""):
            value = values.get(name)
        if value not in (None, ""):
            out[f"seed_{name}"] = str(value).strip()
    return out


def _stem(path: str) -> str:
    return re.sub(r"\.[A-Za-z0-9]+$", "", path)


def seeds_from_study(seeds_study: Study) -> list[SeedPhoto]:
    """The one-image items of ``seeds_study`` as seed photos, by key; EditingError when none."""
    links = (
        ItemImage.objects.filter(item__study=seeds_study, role=ImageRole.IMAGE)
        .select_related("item", "image")
        .order_by("item__key")
    )
    seeds = [
        SeedPhoto(image=link.image, name=_stem(link.item.key), metadata=seed_metadata(link.item.metadata))
        for link in links
    ]
    if not seeds:
        raise EditingError(f"Study {seeds_study.slug} has no one-image items to use as seed photos.")
    return seeds


def seeds_from_folder(folder: str | Path) -> list[SeedPhoto]:
    """Import the seed photos of ``folder`` as image files and return them, by path.

    With ``folder/seeds.csv`` (column ``image``, a path relative to the folder, and any of
    ``seed_gender``/``gender``, ``seed_race``/``race``, ``seed_age_group``/``age_group``) exactly
    its rows are the seeds; otherwise every PNG/JPEG/WebP file under the folder, without
    metadata. Every file is checked before any is stored: one bad row or file raises
    EditingError listing them all, and nothing is imported.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise EditingError(f"Seeds folder {str(root)!r} does not exist.")
    root = root.resolve()
    manifest = root / SEED_MANIFEST
    entries: list[tuple[str, Path, dict[str, str]]] = []
    errors: list[str] = []
    if manifest.is_file():
        with open(manifest, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            if "image" not in [name.strip() for name in reader.fieldnames or []]:
                raise EditingError(f"{manifest}: needs an 'image' column (a path relative to the folder).")
            for line, row in enumerate(reader, start=2):
                # Cells beyond the header land under the key None (as a list): not ours to read.
                row = {k.strip(): (v or "").strip() for k, v in row.items() if isinstance(k, str)}
                try:
                    path = manifest_path_resolve(root, row.get("image", ""))
                except (PathOutsideRoot, InvalidManifestRow) as exc:
                    errors.append(f"{SEED_MANIFEST} line {line} ({row.get('image', '')!r}): {exc}")
                    continue
                entries.append((row["image"], path, seed_metadata(row)))
    else:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix.lower() in SEED_SUFFIXES:
                entries.append((path.relative_to(root).as_posix(), path, {}))
    if not entries and not errors:
        raise EditingError(f"Seeds folder {root} holds no PNG, JPEG or WebP photo.")
    validated = []
    for name, path, metadata in entries:
        try:
            validated.append((name, image_file_validate(path), metadata))
        except ImageRejected as exc:
            errors.append(f"{name}: {exc}")
    if errors:
        raise EditingError(f"Seeds folder {root}: " + "; ".join(errors))
    names = [_path_part(_stem(name)) for name, _, _ in validated]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise EditingError(f"Seeds folder {root}: several photos are named {clashes[0]!r} once simplified.")
    return [
        SeedPhoto(image=image_file_get_or_create(checked), name=_stem(name), metadata=metadata)
        for name, checked, metadata in validated
    ]


# --- editors, seeds, keys ------------------------------------------------------------------------
def editor_resolve(name: str) -> ModelSource:
    """Short name, hub id or local folder → where to load it from, checked without network.
    EditingError naming ``BIASLAB_T2I_<NAME>_WEIGHTS`` when the weights are not here."""
    from detectors.weights import resolve_weights, weights_env_var

    path = Path(name).expanduser()
    label = path.name if path.is_dir() else name
    key = f"t2i_{label}"
    default = EDITORS.get(name, str(path.resolve()) if path.is_dir() else name)
    try:
        source = resolve_weights(key, default, config_names=("model_index.json",))
    except DetectorUnavailable as exc:
        raise EditingError(str(exc)) from None
    return ModelSource(name=label, source=source, env_var=weights_env_var(key))


def edit_seed(*, editor: str, prompt: str, seed_sha256: str, index: int, seed_base: int = 0) -> int:
    """Deterministic 63-bit noise seed of one edit (module docstring); ``prompt`` without suffix."""
    text = f"edit|{seed_base}|{editor}|{prompt}|{seed_sha256}|{index}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def _path_part(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text.strip().lower()).strip("_") or "_"


def suffix_tag(suffix: str) -> str:
    """``suffix-1a2b3c4d`` for a prompt suffix (first 8 hex digits of its SHA-256); ``""`` for none."""
    return f"suffix-{hashlib.sha256(suffix.encode()).hexdigest()[:8]}" if suffix else ""


def pair_key_for(
    *, editor: str, spec: PromptSpec, seed_name: str, index: int, prompt_suffix: str = ""
) -> str:
    """``sd15/profession/lawyer/<seed>/0.png``: the pair item's key and its output's source path."""
    head = _path_part(editor) + (f"+{suffix_tag(prompt_suffix)}" if prompt_suffix else "")
    folder = f"{_path_part(spec.folder)}/" if getattr(spec, "folder", "") else ""
    return (
        f"{head}/{_path_part(spec.category)}/{_path_part(spec.word)}/{folder}"
        f"{_path_part(seed_name)}/{index}.png"
    )


def _key_shard(key: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


# --- planning ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EditSettings:
    """How to edit. ``None``: the pipeline's own default (recorded as the value used); ``size``
    None: the editor's native size."""

    device: str = "cpu"
    batch_size: int = 1
    steps: int | None = None
    guidance: float | None = None
    strength: float | None = None  # img2img only
    image_guidance: float | None = None  # InstructPix2Pix only
    size: int | None = None
    seed_base: int = 0
    prompt_suffix: str = ""
    per_pair: int = 1


@dataclass(frozen=True)
class EditJob:
    seed: SeedPhoto
    spec: PromptSpec
    index: int
    noise_seed: int
    key: str

    def prompt(self, suffix: str) -> str:
        return self.spec.text + suffix


def edit_plan(
    *,
    study: Study,
    editor: str,
    seeds: Sequence[SeedPhoto],
    prompts: Sequence[PromptSpec],
    settings: EditSettings,
    shard: tuple[int, int] | None = None,
) -> tuple[list[EditJob], int]:
    """(jobs still to edit, number already stored): every (prompt, seed, index) of this shard,
    prompt by prompt, minus the keys the study already has for this editor. EditingError when
    two seeds would share keys (names equal once simplified for a path)."""
    named: dict[str, str] = {}
    for seed in seeds:
        other = named.setdefault(_path_part(seed.name), seed.name)
        if other != seed.name:
            raise EditingError(f"Seeds {other!r} and {seed.name!r} would share pair keys: rename one.")
    stored = set(Item.objects.filter(study=study, t2i_model=editor).values_list("key", flat=True))
    jobs: list[EditJob] = []
    skipped = 0
    for spec in prompts:
        for seed in seeds:
            for index in range(settings.per_pair):
                key = pair_key_for(
                    editor=editor,
                    spec=spec,
                    seed_name=seed.name,
                    index=index,
                    prompt_suffix=settings.prompt_suffix,
                )
                if shard is not None and _key_shard(key, shard[1]) != shard[0] - 1:
                    continue
                if key in stored:
                    skipped += 1
                    continue
                noise = edit_seed(
                    editor=editor,
                    prompt=spec.text,
                    seed_sha256=seed.image.sha256,
                    index=index,
                    seed_base=settings.seed_base,
                )
                jobs.append(EditJob(seed=seed, spec=spec, index=index, noise_seed=noise, key=key))
    return jobs, skipped


def study_check(study: Study, *, seeds_study: Study | None = None) -> None:
    """EditingError unless ``study`` keeps input/output pairs (a pair-change protocol) and is not
    the study the seeds come from."""
    roles = protocol_spec(study.protocol).image_roles
    if ImageRole.INPUT not in roles or ImageRole.OUTPUT not in roles:
        raise EditingError(
            f"Study {study.slug} runs the {study.protocol} protocol, whose items have no input/output "
            "images: edit into a pair_change study (create_study --protocol pair_change)."
        )
    if seeds_study is not None and seeds_study.pk == study.pk:
        raise EditingError("The seeds study and the study the pairs go to must differ.")


# --- the pipeline --------------------------------------------------------------------------------
def editor_load(model: ModelSource, *, device: str) -> Any:
    """The editing pipeline on ``device`` (fp16 on CUDA): InstructPix2Pix as itself, any other
    Stable Diffusion checkpoint as its image-to-image pipeline. Never downloads."""
    try:
        pipe = pipeline_load(model, device=device)
    except GenerationError as exc:
        raise EditingError(str(exc)) from None
    if edit_mode(pipe) == PIX2PIX:
        return pipe
    from diffusers import AutoPipelineForImage2Image

    try:
        pipe = AutoPipelineForImage2Image.from_pipe(pipe)
    except ValueError as exc:
        raise EditingError(
            f"{model.name}: {type(pipe).__name__} has no image-to-image form ({exc})."
        ) from None
    pipe.set_progress_bar_config(disable=True)
    return pipe


def edit_mode(pipe: Any) -> str:
    """``instruct-pix2pix`` for an InstructPix2Pix pipeline, ``img2img`` otherwise."""
    return PIX2PIX if "InstructPix2Pix" in type(pipe).__name__ else IMG2IMG


def _call_default(pipe: Any, name: str) -> Any:
    import inspect

    param = inspect.signature(pipe.__call__).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def effective_edit_settings(pipe: Any, settings: EditSettings) -> dict[str, Any]:
    """strength, steps, guidance and image_guidance as the pipeline will use them (``None``
    where a setting does not apply to this kind of editor)."""
    mode = edit_mode(pipe)

    def value(given: Any, name: str) -> Any:
        return given if given is not None else _call_default(pipe, name)

    return {
        "strength": value(settings.strength, "strength") if mode == IMG2IMG else None,
        "steps": value(settings.steps, "num_inference_steps"),
        "guidance": value(settings.guidance, "guidance_scale"),
        "image_guidance": value(settings.image_guidance, "image_guidance_scale") if mode == PIX2PIX else None,
    }


def settings_check(pipe: Any, settings: EditSettings) -> None:
    """EditingError for a setting this kind of editor has no use for (strength on
    InstructPix2Pix, image guidance on img2img): silently ignoring it would mislabel a run."""
    mode = edit_mode(pipe)
    if mode == PIX2PIX and settings.strength is not None:
        raise EditingError("--strength applies to img2img editors; InstructPix2Pix takes --image-guidance.")
    if mode == IMG2IMG and settings.image_guidance is not None:
        raise EditingError("--image-guidance applies to InstructPix2Pix; img2img editors take --strength.")


def seed_input(image: Image, size: int) -> Any:
    """The seed photo's file as an RGB ``size`` x ``size`` PIL image (centre square, Lanczos)."""
    from django.conf import settings as django_settings
    from PIL import Image as PILImage
    from PIL import ImageOps

    with PILImage.open(Path(django_settings.MEDIA_ROOT) / image.file) as opened:
        rgb = opened.convert("RGB")
    return ImageOps.fit(rgb, (size, size), PILImage.Resampling.LANCZOS)


def images_edit(
    pipe: Any, jobs: Sequence[EditJob], settings: EditSettings, inputs: Sequence[Any]
) -> list[Any]:
    """One batch through the editor → ``(PIL image, nsfw flag or None)`` per job, in order."""
    import torch

    generators = [torch.Generator(device="cpu").manual_seed(job.noise_seed) for job in jobs]
    kwargs: dict[str, Any] = {}
    if settings.steps is not None:
        kwargs["num_inference_steps"] = settings.steps
    if settings.guidance is not None:
        kwargs["guidance_scale"] = settings.guidance
    if settings.strength is not None:
        kwargs["strength"] = settings.strength
    if settings.image_guidance is not None:
        kwargs["image_guidance_scale"] = settings.image_guidance
    with torch.inference_mode():
        result = pipe(
            prompt=[job.prompt(settings.prompt_suffix) for job in jobs],
            image=list(inputs),
            generator=generators,
            output_type="pil",
            **kwargs,
        )
    flags = getattr(result, "nsfw_content_detected", None) or [None] * len(jobs)
    return list(zip(result.images, flags, strict=True))


# --- the loop ------------------------------------------------------------------------------------
def edit_run(
    *,
    study: Study,
    model: ModelSource,
    seeds: Sequence[SeedPhoto],
    prompts: Sequence[PromptSpec],
    settings: EditSettings,
    prompt_set: str = "",
    seeds_source: str = "",
    pipe: Any = None,
    shard: tuple[int, int] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int], Progress] | None = None,
    on_warning: Callable[[str], None] = lambda message: None,
) -> GenerationOutcome:
    """Edit and store every missing pair of this shard; returns counts (``created`` pairs).

    ``generate_images``' loop (``detectors.generation.batches_run``): the editor runs one batch
    ahead in a thread while this thread stores the previous batch, each pair in its own
    transaction (``studies.ingest.item_image_store``); ``should_stop`` is checked before each
    batch; a restart re-edits at most the batches in flight. ``pipe`` is loaded when not given.
    """
    study_check(study)
    jobs, skipped = edit_plan(
        study=study, editor=model.name, seeds=seeds, prompts=prompts, settings=settings, shard=shard
    )
    outcome = GenerationOutcome(skipped=skipped)
    if not jobs:
        return outcome
    if pipe is None:
        pipe = editor_load(model, device=settings.device)
    settings_check(pipe, settings)
    size = settings.size or NATIVE_SIZES.get(model.name, DEFAULT_SIZE)
    inputs: dict[str, Any] = {}  # seed sha256 → resized input: 54 seeds serve 12,312 edits

    def run_batch(batch: Sequence[EditJob]) -> list[Any]:
        for job in batch:
            if job.seed.image.sha256 not in inputs:
                inputs[job.seed.image.sha256] = seed_input(job.seed.image, size)
        return images_edit(pipe, batch, settings, [inputs[job.seed.image.sha256] for job in batch])

    storer = _PairStorer(
        study=study,
        model=model,
        settings=settings,
        base_params={
            **_base_params(pipe, model, settings, prompt_set),
            "input_size": size,
            "seeds": seeds_source,
        },
    )
    stored_jobs, outcome.seconds = batches_run(
        jobs,
        batch_size=settings.batch_size,
        run_batch=run_batch,
        store=lambda job, result: storer.store(job, result, outcome),
        should_stop=should_stop,
        progress=progress,
    )
    outcome.interrupted = stored_jobs < len(jobs)
    return outcome


class _PairStorer:
    """Stores each edit as a pair item (main thread only: it uses the database)."""

    def __init__(
        self, *, study: Study, model: ModelSource, settings: EditSettings, base_params: dict[str, Any]
    ) -> None:
        self.study = study
        self.model = model
        self.settings = settings
        self.base_params = base_params
        self.prompts: dict[tuple[str, str, str], Prompt] = {}

    def store(self, job: EditJob, result: tuple[Any, bool | None], outcome: GenerationOutcome) -> None:
        image, nsfw = result
        text = job.prompt(self.settings.prompt_suffix)
        spec = job.spec
        prompt_key = (spec.category, spec.word, text)
        if prompt_key not in self.prompts:
            self.prompts[prompt_key] = prompt_get_or_create(
                study=self.study, category=spec.category, word=spec.word, text=text
            )
        params = {
            **self.base_params,
            "seed": job.noise_seed,
            "prompt": text,
            "seed_sha256": job.seed.image.sha256,
            "height": image.height,
            "width": image.width,
        }
        if nsfw is not None:
            # The checker blacks out what it flags; the analysis must know this is no edit.
            params["nsfw_flagged"] = bool(nsfw)
        metadata = {**spec.metadata, **job.seed.metadata, "seed_key": job.seed.name}
        if self.settings.prompt_suffix:
            metadata["prompt_suffix"] = self.settings.prompt_suffix
        _, created = item_image_store(
            study=self.study,
            data=png_bytes(image),
            key=job.key,
            role=ImageRole.OUTPUT,
            prompt=self.prompts[prompt_key],
            t2i_model=self.model.name,
            seed=job.noise_seed,
            index=job.index,
            params=params,
            metadata=metadata,
            extra_images={ImageRole.INPUT: job.seed.image},
        )
        outcome.created += int(created)


def _base_params(pipe: Any, model: ModelSource, settings: EditSettings, prompt_set: str) -> dict[str, Any]:
    import diffusers

    return {
        "editor": model.name,
        "weights": model.source,
        "pipeline": type(pipe).__name__,
        "mode": edit_mode(pipe),
        "scheduler": type(getattr(pipe, "scheduler", None)).__name__,
        **effective_edit_settings(pipe, settings),
        "prompt_suffix": settings.prompt_suffix,
        "seed_base": settings.seed_base,
        "seed_rule": SEED_RULE,
        "device": settings.device,
        "dtype": "float16" if settings.device.startswith("cuda") else "float32",
        "batch_size": settings.batch_size,
        "prompt_set": prompt_set,
        "diffusers": diffusers.__version__,
    }
