"""A fake detector for tests that need predictions without torch, dlib or weights.

``FakeDetector`` (key "fake", version "1") decides from the image content alone, so the same
image always gets the same verdict: mean pixel value < 85 → male, < 170 → female, else
filtered as low confidence. Use the ``fake_detector`` fixture (import it into a conftest or a
test module) or the ``registered_fake()`` context manager to put it in the registry.
``FakeMeasurer`` (key "fake_measure") declares the measurements kind: a face, an age and a skin
gray value read from the pixels (``registered_fake(FakeMeasurer)``).

The other fakes behave the same in every process — a Ray worker builds its own instance from the
class's dotted path, and class attributes set by a test do not reach it — so their behaviour
comes from the image or from options: ``FussyFakeDetector`` (a batch with a bright image raises),
``SleepyFakeDetector`` (a GIL-free wait per image), ``CrashingFakeDetector`` (the process dies),
``DatabaseProbeDetector`` (says whether it could query the database), and
``WhereVersionFakeDetector`` and ``WorkerlessWeightsFakeDetector`` (a version, or weights, that
differ between the driver and the workers), and ``FakeJudge`` (key "fake_judge": a judge answering
each image's questions from its pixels). ``registered(cls)`` puts one
in the registry for the duration.

``save_tiny_sd(folder)`` writes a tiny random Stable Diffusion pipeline for generation tests and
the smoke benchmarks.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import ImageStat
from PIL.Image import Image as PILImage

from detectors import registry
from detectors.base import Detector, DetectorOutput, DetectorUnavailable
from detectors.judges import JudgeDetector, judge_output

FAKE_KEY = "fake"
FAKE_MEASURE_KEY = "fake_measure"


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


def measurements_for(image: PILImage) -> dict[str, object]:
    """The fake measurer's output for an image: no face on a white image, else an age and the
    gray value from the pixels (so the expected output of a test image can be computed)."""
    gray = round(ImageStat.Stat(image.convert("L")).mean[0], 3)
    if gray > 250:
        return {"face": False, "age": None, "gender": None, "skin_gray": None}
    return {"face": True, "age": round(gray / 255 * 100, 2), "gender": None, "skin_gray": gray}


class FakeMeasurer(FakeDetector):
    """Declares the measurements kind; ``wrong_kind`` makes it answer with gender verdicts."""

    key: ClassVar[str] = FAKE_MEASURE_KEY
    output_kind: ClassVar[str] = "measurements"
    description: ClassVar[str] = "Test double: measurements from the pixels."
    wrong_kind: ClassVar[bool] = False

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        if self.wrong_kind:
            return super().predict(batch)
        type(self).calls.append(len(batch))
        return [DetectorOutput.of("measurements", measurements_for(image)) for image in batch]


# --- fakes that behave the same in any process ------------------------------------------------------
class FussyFakeDetector(FakeDetector):
    """The fake rule, but any batch holding a bright image (mean pixel ≥ 170) raises — so that
    image fails alone after the one-by-one retry and the others of its batch get verdicts."""

    key: ClassVar[str] = "fake_fussy"

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        if any(mean_pixel(image) >= 170 for image in batch):
            raise ValueError("fake detector refuses bright images")
        return [verdict_for(image) for image in batch]


class SleepyFakeDetector(FakeDetector):
    """The fake rule after ``sleep_ms`` of GIL-free waiting per image: a detector whose per-image
    cost dominates, without needing more cores than this machine has (bench/bench_ray.py)."""

    key: ClassVar[str] = "fake_sleepy"
    option_help: ClassVar[dict[str, str]] = {"sleep_ms": "milliseconds slept per image"}

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.sleep_s = self.number_option("sleep_ms", options.get("sleep_ms", 0)) / 1000

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        time.sleep(self.sleep_s * len(batch))
        return [verdict_for(image) for image in batch]


class CrashingFakeDetector(FakeDetector):
    """The fake rule, but the process running it dies on the spot (``os._exit``, as a SIGKILL or
    the OOM killer would end it: no exception, no cleanup):

    - ``crash_marker`` + ``crash_on_call``: the first process whose ``crash_on_call``-th predict
      call creates the marker file dies — one death per marker, whichever worker gets there;
    - ``poison_mean``: every process dies on any batch holding an image of that mean pixel value
      (rounded to 3 places, as in the fake's scores) — a poisonous image.
    """

    key: ClassVar[str] = "fake_crash"
    option_help: ClassVar[dict[str, str]] = {
        "crash_marker": "file created by the one process that dies",
        "crash_on_call": "the predict call (1-based, per process) that dies",
        "poison_mean": "an image with this mean pixel value kills every process that predicts it",
    }

    def __init__(self, *, device: str = "cpu", **options: Any) -> None:
        super().__init__(device=device, **options)
        self.marker = str(options.get("crash_marker", ""))
        self.crash_on_call = int(options.get("crash_on_call", 1))
        self.poison = options.get("poison_mean")
        self.n_calls = 0

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        self.n_calls += 1
        if self.poison is not None and any(round(mean_pixel(i), 3) == self.poison for i in batch):
            os._exit(1)
        if self.marker and self.n_calls == self.crash_on_call:
            die_once(self.marker)
        return [verdict_for(image) for image in batch]


def die_once(marker: str) -> None:
    """End this process on the spot (``os._exit``: no exception, no cleanup, as a SIGKILL or the
    OOM killer would) if it is the first to create the file ``marker``; return otherwise. One
    death per marker, whichever worker process gets there first."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(1)


class DatabaseProbeDetector(FakeDetector):
    """Tries to count the images through the ORM: "male" with detail "database reached" when it
    can, filtered ("other") with the error as detail when it cannot."""

    key: ClassVar[str] = "fake_db_probe"

    def predict(self, batch: Sequence[PILImage]) -> list[DetectorOutput]:
        try:
            from studies.models import Image

            count = Image.objects.count()
        except Exception as exc:
            detail = f"no database: {type(exc).__name__}: {exc}"
            return [DetectorOutput.filtered("other", detail=detail) for _ in batch]
        return [DetectorOutput(verdict="male", detail=f"database reached ({count} images)") for _ in batch]


class WhereVersionFakeDetector(FakeDetector):
    """The fake rule under a version that differs between a process with Django configured and
    one without (a Ray worker): a worker node with other packages, in miniature."""

    key: ClassVar[str] = "fake_where"

    @property
    def version_id(self) -> str:
        return "1+" + ("django" if os.environ.get("DJANGO_SETTINGS_MODULE") else "no-django")


class WorkerlessWeightsFakeDetector(FakeDetector):
    """Loads where Django is configured (the driver) and raises DetectorUnavailable elsewhere:
    weights present on the driver's machine and missing on the workers'."""

    key: ClassVar[str] = "fake_no_weights"

    def load(self) -> None:
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise DetectorUnavailable("set BIASLAB_FAKE_WEIGHTS on the workers")


def judge_probabilities(image: PILImage, question: Any) -> dict[str, float]:
    """The fake judge's probabilities for one question: the choice nearest the image's mean
    pixel (0 → first choice, 255 → last) is the likeliest, a softmax over -3·distance."""
    values = [value for value, _text in question.choices]
    at = mean_pixel(image) / 255 * (len(values) - 1)
    weights = [math.exp(-3 * abs(at - n)) for n in range(len(values))]
    total = sum(weights)
    return {value: w / total for value, w in zip(values, weights, strict=True)}


class FakeJudge(JudgeDetector):
    """A judge without a model: each image's questions answered from its pixels
    (``judge_probabilities``); ``calls`` records the question keys of each image it was asked."""

    key: ClassVar[str] = "fake_judge"
    description: ClassVar[str] = "Test double: a judge answering from the mean pixel value."
    calls: ClassVar[list[tuple[str, ...]]] = []

    def predict(
        self, batch: Sequence[PILImage], questions: Sequence[Sequence[Any]] | None = None
    ) -> list[DetectorOutput]:
        assert self.ask is not None
        outputs = []
        for image, asked in zip(batch, self.questions_of_batch(len(batch), questions), strict=True):
            type(self).calls.append(tuple(q.key for q in asked))
            probabilities = {q.key: judge_probabilities(image, q) for q in asked}
            outputs.append(judge_output(self.ask.kind, probabilities, detail={"mean": mean_pixel(image)}))
        return outputs


@contextmanager
def registered(cls: type[Detector]) -> Iterator[type[Detector]]:
    """Register a detector class of this module under its key for the duration."""
    previous = registry.DETECTORS.get(cls.key)
    registry.register(cls.key, f"{__name__}.{cls.__name__}")
    try:
        yield cls
    finally:
        if previous is None:
            registry.unregister(cls.key)
        else:
            registry.register(cls.key, previous)


def _reset() -> None:
    for cls in (FakeDetector, FakeMeasurer):
        cls.fail_on_load = ""
        cls.fail_when = None
        cls.calls = []
    FakeMeasurer.wrong_kind = False


@contextmanager
def registered_fake(cls: type[FakeDetector] = FakeDetector) -> Iterator[type[FakeDetector]]:
    """Register ``cls`` (FakeDetector under "fake" by default) for the duration; restores the
    registry after."""
    previous = registry.DETECTORS.get(cls.key)
    _reset()
    registry.register(cls.key, f"{__name__}.{cls.__name__}")
    try:
        yield cls
    finally:
        _reset()
        if previous is None:
            registry.unregister(cls.key)
        else:
            registry.register(cls.key, previous)


@pytest.fixture
def fake_detector() -> Iterator[type[FakeDetector]]:
    """The FakeDetector class, registered as "fake" for one test."""
    with registered_fake() as cls:
        yield cls


def tiny_sd_components(model_dir: Path, *, unet_in_channels: int = 4) -> dict[str, Any]:
    """The random-weight parts of a tiny Stable Diffusion pipeline (unet, vae, text encoder,
    tokenizer), seeded, for any SD pipeline class. ``unet_in_channels`` is 4 for text-to-image
    and img2img, 8 for InstructPix2Pix (noisy latents and the input image's latents).

    The tokenizer spells prompts letter by letter (tests.detectors.tiny_models), so no prompt
    word is unknown; its vocabulary is saved beside ``model_dir``."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from tests.detectors.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer(model_dir.parent / f"{model_dir.name}-vocab")
    tokenizer.model_max_length = 77  # the pipeline pads prompts to this length
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=32,
        in_channels=unet_in_channels,
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
    return {"unet": unet, "vae": vae, "text_encoder": text_encoder, "tokenizer": tokenizer}


def save_tiny_sd(model_dir: Path) -> Path:
    """Save a random-weight Stable Diffusion pipeline into ``model_dir``, laid out like a real one.

    Built offline in about a second; 64x64 images in 2 steps take ~0.1 s on a CPU.
    """
    parts = tiny_sd_components(model_dir)  # first: it makes torchvision importable for diffusers
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        **parts,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(model_dir)
    return model_dir
