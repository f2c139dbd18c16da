"""Editing seed photos with a diffusers image-to-image pipeline, restartably (BiasPainter)."""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors.executors import WorkerSpec
from detectors.executors.workers import ImageBytes
from detectors.remote import image_payload
from generation.edit_pipeline import SEED_RULE, EditingError, EditSettings, EditTask, edit_seed, input_size
from generation.generation import (
    GenerationOutcome,
    ModelSource,
    PromptSpec,
    batches_run,
    path_part,
    pipeline_worker_spec,
    prompt_cache,
    run_params,
)
from studies.imports.images import (
    ImageRejected,
    image_file_get_or_create,
    image_file_validate,
    item_image_store,
)
from studies.imports.manifest_rows import InvalidManifestRow, PathOutsideRoot, manifest_path_resolve
from studies.models import Image, ImageRole, Item, ItemImage, Study
from studies.progress import Progress
from studies.protocols import protocol_spec

if TYPE_CHECKING:
    from detectors.executors import Executor
    from generation.generation import Generated

#: Seed-photo attributes copied into every pair's metadata (as ``seed_<name>``).
SEED_ATTRIBUTES = ("gender", "race", "age_group")
#: A seeds folder may describe its photos in this CSV (column ``image`` + seed attributes).
SEED_MANIFEST = "seeds.csv"
SEED_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


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
    """Import the seed photos of ``folder`` as image files and return them, by path."""
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
    names = [path_part(_stem(name)) for name, _, _ in validated]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise EditingError(f"Seeds folder {root}: several photos are named {clashes[0]!r} once simplified.")
    return [
        SeedPhoto(image=image_file_get_or_create(checked), name=_stem(name), metadata=metadata)
        for name, checked, metadata in validated
    ]


# --- keys ------------------------------------------------------------------------------------
def pair_key_for(
    *, editor: str, spec: PromptSpec, seed_name: str, index: int, prompt_suffix: str = ""
) -> str:
    """``sd15/profession/lawyer/<seed>/0.png``: the pair item's key and its output's source path; a
    prompt suffix tags the editor (``sd15+suffix-1a2b3c4d``, the first 8 hex digits of its SHA-256)."""
    head = path_part(editor)
    if prompt_suffix:
        head += f"+suffix-{hashlib.sha256(prompt_suffix.encode()).hexdigest()[:8]}"
    folder = f"{path_part(spec.folder)}/" if getattr(spec, "folder", "") else ""
    return (
        f"{head}/{path_part(spec.category)}/{path_part(spec.word)}/{folder}{path_part(seed_name)}/{index}.png"
    )


# --- planning ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EditJob:
    seed: SeedPhoto
    spec: PromptSpec
    index: int
    noise_seed: int
    key: str

    def prompt(self, suffix: str) -> str:
        return self.spec.text + suffix

    def task(self, suffix: str, seed: str | ImageBytes) -> EditTask:
        """This job as plain data for the editor (``seed``: the photo's path or bytes)."""
        return EditTask(self.prompt(suffix), self.noise_seed, self.seed.image.sha256, seed)


def edit_plan(
    *,
    study: Study,
    editor: str,
    seeds: Sequence[SeedPhoto],
    prompts: Sequence[PromptSpec],
    settings: EditSettings,
    shard: tuple[int, int] | None = None,
) -> tuple[list[EditJob], int]:
    """(jobs still to edit, number already stored): every (prompt, seed, index) of this shard, prompt by
    prompt, minus the keys the study already has for this editor."""
    named: dict[str, str] = {}
    for seed in seeds:
        other = named.setdefault(path_part(seed.name), seed.name)
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
                # A shard takes the keys whose SHA-256 (first 8 bytes) is its number modulo the count.
                digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
                if shard is not None and digest % shard[1] != shard[0] - 1:
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


# --- the loop ------------------------------------------------------------------------------------
def edit_worker_spec(model: ModelSource, settings: EditSettings) -> WorkerSpec:
    """How a worker loads the editor (``generation.workers.EditWorker``): the model's source and
    the edit settings."""
    return pipeline_worker_spec("EditWorker", model, settings)


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
    executor: Executor | None = None,
    send_images: bool = False,
) -> GenerationOutcome:
    """Edit and store every missing pair of this shard; returns counts (``created`` pairs)."""
    study_check(study)
    jobs, skipped = edit_plan(
        study=study, editor=model.name, seeds=seeds, prompts=prompts, settings=settings, shard=shard
    )
    outcome = GenerationOutcome(skipped=skipped)
    if not jobs:
        return outcome
    from django.conf import settings as django_settings

    media = Path(django_settings.MEDIA_ROOT)
    # One source per seed photo (54 seeds serve 12,312 edits): its path, or its bytes read once.
    photos = {job.seed.image.sha256: job.seed.image for job in jobs}
    sources = {sha: image_payload(media / image.file, send_images) for sha, image in photos.items()}
    size = input_size(model.name, settings)

    def job_task(job: EditJob) -> EditTask:
        return job.task(settings.prompt_suffix, sources[job.seed.image.sha256])

    def storer(info: dict[str, Any]) -> Callable[[EditJob, Any], None]:
        params = run_params(
            "editor",
            info,
            model,
            settings,
            prompt_set,
            prompt_suffix=settings.prompt_suffix,
            seed_rule=SEED_RULE,
            input_size=size,
            seeds=seeds_source,
        )
        prompt = prompt_cache(study)
        suffix = settings.prompt_suffix

        def store(job: EditJob, edited: Generated) -> None:
            text, spec = job.prompt(suffix), job.spec
            pair_params = {
                **params,
                "seed": job.noise_seed,
                "prompt": text,
                "seed_sha256": job.seed.image.sha256,
                "height": edited.height,
                "width": edited.width,
            }
            if edited.nsfw is not None:
                # The checker blacks out what it flags; the analysis must know this is no edit.
                pair_params["nsfw_flagged"] = edited.nsfw
            metadata = {**spec.metadata, **job.seed.metadata, "seed_key": job.seed.name}
            if suffix:
                metadata["prompt_suffix"] = suffix
            _, created = item_image_store(
                study=study,
                data=edited.png,
                key=job.key,
                role=ImageRole.OUTPUT,
                prompt=prompt(spec.category, spec.word, text),
                t2i_model=model.name,
                seed=job.noise_seed,
                index=job.index,
                params=pair_params,
                metadata=metadata,
                extra_images={ImageRole.INPUT: job.seed.image},
            )
            outcome.created += int(created)

        return store

    return batches_run(
        executor,
        edit_worker_spec(model, settings),
        jobs,
        outcome,
        storer=storer,
        failed=lambda job, error: on_warning(f"{job.key}: not edited, {error.message}; a re-run retries it"),
        batch_size=settings.batch_size,
        pipe=pipe,
        should_stop=should_stop,
        progress=progress,
        payload=job_task,
    )
