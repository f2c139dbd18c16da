"""A fake detector for tests that need predictions without torch, dlib or weights.

``FakeDetector`` (key "fake", version "1") decides from the image content alone, so the same
image always gets the same verdict: mean pixel value < 85 → male, < 170 → female, else
filtered as low confidence. Use the ``fake_detector`` fixture (import it into a conftest or a
test module) or the ``registered_fake()`` context manager to put it in the registry.

``save_tiny_sd(folder)`` writes a tiny random Stable Diffusion pipeline for generation tests and
the smoke benchmarks.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import pytest
from PIL import ImageStat
from PIL.Image import Image as PILImage

from detectors import registry
from detectors.base import Detector, DetectorOutput, DetectorUnavailable

FAKE_KEY = "fake"


def mean_pixel(image: PILImage) -> float:
    return sum(ImageStat.Stat(image.convert("L")).mean)


def verdict_for(image: PILImage) -> DetectorOutput:
    """The fake rule, exposed so tests can compute the expected verdict of an image."""
    mean = mean_pixel(image)
    scores = {"mean": round(mean, 3)}
    if mean < 85:
        return DetectorOutput(verdict="male", scores=scores)
    if mean < 170:
        return DetectorOutput(verdict="female", scores=scores)
    return DetectorOutput.filtered("low_confidence", scores=scores)


class FakeDetector(Detector):
    """Deterministic from pixels. Class attributes let a test make it fail on purpose:

    - ``fail_on_load``: ``load()`` raises DetectorUnavailable with this message;
    - ``fail_when``: predict raises ValueError for any batch containing an image for which
      this predicate is true (so a batch fails, and the one-by-one retry isolates the image);
    - ``calls``: how many images each predict call got (for batching assertions).
    """

    key: ClassVar[str] = FAKE_KEY
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "Test double: verdict from the mean pixel value."
    fail_on_load: ClassVar[str] = ""
    fail_when: ClassVar[object] = None
    calls: ClassVar[list[int]] = []

    def load(self) -> None:
        if self.fail_on_load:
            raise DetectorUnavailable(self.fail_on_load)

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        type(self).calls.append(len(batch))
        # Read without binding: a lambda stored on the class would otherwise become a method.
        predicate = inspect.getattr_static(type(self), "fail_when")
        if callable(predicate) and any(predicate(image) for image in batch):
            raise ValueError("fake detector refuses this image")
        return [verdict_for(image) for image in batch]


def _reset() -> None:
    FakeDetector.fail_on_load = ""
    FakeDetector.fail_when = None
    FakeDetector.calls = []


@contextmanager
def registered_fake() -> Iterator[type[FakeDetector]]:
    """Register FakeDetector under "fake" for the duration; restores the registry after."""
    previous = registry.DETECTORS.get(FAKE_KEY)
    _reset()
    registry.register(FAKE_KEY, f"{__name__}.FakeDetector")
    try:
        yield FakeDetector
    finally:
        _reset()
        if previous is None:
            registry.unregister(FAKE_KEY)
        else:
            registry.register(FAKE_KEY, previous)


@pytest.fixture
def fake_detector() -> Iterator[type[FakeDetector]]:
    """The FakeDetector class, registered as "fake" for one test."""
    with registered_fake() as cls:
        yield cls


def save_tiny_sd(model_dir: Path) -> Path:
    """Save a random-weight Stable Diffusion pipeline into ``model_dir``, laid out like a real one.

    Built offline in about a second; 64x64 images in 2 steps take ~0.1 s on a CPU. The tokenizer
    spells prompts letter by letter (tests.detectors.tiny_models), so no prompt word is unknown.
    """
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from tests.detectors.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer(model_dir.parent / f"{model_dir.name}-vocab")
    tokenizer.model_max_length = 77  # the pipeline pads prompts to this length
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=32,
        in_channels=4,
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
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
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
