"""Tiny random-weight image editors saved the way real ones are, for edit_images tests and the
smoke benchmark.

- ``save_tiny_img2img(folder)``: the tiny Stable Diffusion of ``tests.fakes.save_tiny_sd`` (a
  text-to-image checkpoint, as sd15 / sd21 are: ``edit_images`` turns it into an img2img
  pipeline);
- ``save_tiny_pix2pix(folder)``: an InstructPix2Pix pipeline of the same size — its UNet takes
  8 channels (noisy latents + the input image's latents), as timbrooks/instruct-pix2pix does.

Both load offline with ``from_pretrained(folder)``; 64x64 images in 2 steps take ~0.1 s on a CPU.

``CrashingEditWorker`` is the real Ray edit worker whose process dies once, mid-run.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from generation.workers import EditWorker
from tests.fakes import die_once


class CrashingEditWorker(EditWorker):
    """``EditWorker``, but the first process whose ``crash_on_call``-th batch creates the file
    ``crash_marker`` dies on the spot (``tests.fakes.die_once``)."""

    def __init__(self, *, crash_marker: str, crash_on_call: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash_marker = crash_marker
        self.crash_on_call = crash_on_call
        self.calls = 0

    def run(self, keys: Sequence[Hashable], tasks: Sequence[Any]) -> list[Any]:
        self.calls += 1
        if self.calls == self.crash_on_call:
            die_once(self.crash_marker)
        return super().run(keys, tasks)


def save_tiny_img2img(model_dir: Path) -> Path:
    """A tiny text-to-image SD checkpoint in ``model_dir`` (img2img reuses its components)."""
    from tests.fakes import save_tiny_sd

    return save_tiny_sd(model_dir)


def save_tiny_pix2pix(model_dir: Path) -> Path:
    """Build a random tiny StableDiffusionInstructPix2PixPipeline and save it into ``model_dir``."""
    from tests.fakes import tiny_sd_components

    # in_channels 8: the noisy latents and the input image's latents, concatenated. First: it
    # makes torchvision importable for diffusers.
    parts = tiny_sd_components(model_dir, unet_in_channels=8)
    from diffusers import EulerAncestralDiscreteScheduler, StableDiffusionInstructPix2PixPipeline

    # timbrooks/instruct-pix2pix ships the Euler ancestral scheduler.
    scheduler = EulerAncestralDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear"
    )
    pipe = StableDiffusionInstructPix2PixPipeline(
        **parts,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(model_dir)
    return model_dir
