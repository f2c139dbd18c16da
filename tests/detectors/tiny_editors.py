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

from detectors.executors.workers import EditWorker
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
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from diffusers import (
        AutoencoderKL,
        EulerAncestralDiscreteScheduler,
        StableDiffusionInstructPix2PixPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    from tests.detectors.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer(model_dir.parent / f"{model_dir.name}-vocab")
    tokenizer.model_max_length = 77
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=32,
        in_channels=8,  # noisy latents and the input image's latents, concatenated
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=4,
        attention_head_dim=4,
    )
    vae = AutoencoderKL(
        block_out_channels=[8, 16],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"],
        latent_channels=4,
        norm_num_groups=4,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    # timbrooks/instruct-pix2pix ships the Euler ancestral scheduler.
    scheduler = EulerAncestralDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear"
    )
    pipe = StableDiffusionInstructPix2PixPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(model_dir)
    return model_dir
