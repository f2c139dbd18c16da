"""The editing itself, without Django: what a Ray worker of ``edit_images --executor ray`` runs."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detectors.executors.workers import ImageBytes
from generation.generation import (
    Generated,
    GenerationError,
    ModelSource,
    call_default,
    pipeline_info,
    pipeline_load,
    pipeline_run,
    t2i_model_resolve,
)

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

IMG2IMG = "img2img"
PIX2PIX = "instruct-pix2pix"
SEED_RULE = (
    "sha256(edit|seed_base|editor|prompt without suffix|seed sha256|index)[:8] >> 1, CPU torch.Generator"
)


class EditingError(GenerationError):
    """Editing cannot start: bad seeds, study, prompt set, weights or settings. Message is for the user."""


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


def input_size(editor: str, settings: EditSettings) -> int:
    """The side seeds are resized to: ``settings.size``, else the editor's native size."""
    return settings.size or NATIVE_SIZES.get(editor, DEFAULT_SIZE)


def editor_resolve(name: str) -> ModelSource:
    """``t2i_model_resolve`` over the editors' short names, failing with an EditingError."""
    try:
        return t2i_model_resolve(name, EDITORS)
    except GenerationError as exc:
        raise EditingError(str(exc)) from None


def edit_seed(*, editor: str, prompt: str, seed_sha256: str, index: int, seed_base: int = 0) -> int:
    """Deterministic 63-bit noise seed of one edit (generation.editing); ``prompt`` without suffix."""
    text = f"edit|{seed_base}|{editor}|{prompt}|{seed_sha256}|{index}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


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


def settings_check(pipe: Any, settings: EditSettings) -> None:
    """EditingError for a setting this kind of editor has no use for (strength on
    InstructPix2Pix, image guidance on img2img): silently ignoring it would mislabel a run."""
    mode = edit_mode(pipe)
    if mode == PIX2PIX and settings.strength is not None:
        raise EditingError("--strength applies to img2img editors; InstructPix2Pix takes --image-guidance.")
    if mode == IMG2IMG and settings.image_guidance is not None:
        raise EditingError("--image-guidance applies to InstructPix2Pix; img2img editors take --strength.")


def editor_info(pipe: Any, settings: EditSettings) -> dict[str, Any]:
    """``pipeline_info`` of an editor: its mode, and strength, steps, guidance and image_guidance as it will
    use them (``None`` where a setting does not apply to this kind of editor)."""
    mode = edit_mode(pipe)
    return pipeline_info(
        pipe,
        mode=mode,
        strength=call_default(pipe, "strength", settings.strength) if mode == IMG2IMG else None,
        steps=call_default(pipe, "num_inference_steps", settings.steps),
        guidance=call_default(pipe, "guidance_scale", settings.guidance),
        image_guidance=(
            call_default(pipe, "image_guidance_scale", settings.image_guidance) if mode == PIX2PIX else None
        ),
    )


# --- tasks ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EditTask:
    """One edit as plain data for Ray workers: the prompt as the editor gets it (suffix included), the
    noise seed, the seed photo's SHA-256 (its inputs' cache key) and the photo (a path or ``ImageBytes``)."""

    prompt: str
    noise_seed: int
    seed_sha256: str
    seed: str | ImageBytes


def seed_input(source: str | Path | ImageBytes, size: int) -> Any:
    """A seed photo (a file, or its bytes) as an RGB ``size`` x ``size`` PIL image: the centre
    square, resized with Lanczos."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    fp: Any = io.BytesIO(source.data) if isinstance(source, ImageBytes) else source
    with PILImage.open(fp) as opened:
        rgb = opened.convert("RGB")
    return ImageOps.fit(rgb, (size, size), PILImage.Resampling.LANCZOS)


def images_edit(
    pipe: Any, tasks: Sequence[EditTask], settings: EditSettings, inputs: Sequence[Any]
) -> list[Any]:
    """One batch through the editor → ``(PIL image, nsfw flag or None)`` per task, in order."""
    options = {
        "num_inference_steps": settings.steps,
        "guidance_scale": settings.guidance,
        "strength": settings.strength,
        "image_guidance_scale": settings.image_guidance,
    }
    result = pipeline_run(
        pipe,
        prompts=[task.prompt for task in tasks],
        seeds=[task.noise_seed for task in tasks],
        options=options,
        image=list(inputs),
    )
    flags = getattr(result, "nsfw_content_detected", None) or [None] * len(tasks)
    return list(zip(result.images, flags, strict=True))


class SeedEditor:
    """A loaded editor and the seed inputs it has resized so far (54 seed photos serve 12,312 edits: each is
    decoded and resized once)."""

    def __init__(self, pipe: Any, settings: EditSettings, size: int) -> None:
        self.pipe = pipe
        self.settings = settings
        self.size = size
        self.inputs: dict[str, Any] = {}

    def edit(self, tasks: Sequence[EditTask]) -> list[Generated]:
        """One ``Generated`` per task, in order; an unreadable seed photo raises (the run's error,
        as it is in a local run: every pair of that seed would fail the same way)."""
        for task in tasks:
            if task.seed_sha256 not in self.inputs:
                self.inputs[task.seed_sha256] = seed_input(task.seed, self.size)
        results = images_edit(self.pipe, tasks, self.settings, [self.inputs[t.seed_sha256] for t in tasks])
        return [Generated.of(image, nsfw) for image, nsfw in results]
