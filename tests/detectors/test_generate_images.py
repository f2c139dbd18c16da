from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotate.models import Image, Prompt
from detectors.generation import (
    Settings,
    generation_run,
    image_seed,
    prompt_set_load,
    source_path_for,
    t2i_model_resolve,
)
from detectors.progress import StopFlag
from tests.factories import StudyFactory
from tests.fakes import save_tiny_sd

pytestmark = pytest.mark.django_db

PROMPTS = (
    "category,word,prompt\n"
    "profession,lawyer,a photo of one real person who is a lawyer\n"
    "profession,taxi driver,a photo of one real person who is a taxi driver\n"
)


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory) -> Path:
    return save_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "tiny-sd")


@pytest.fixture
def prompt_csv(tmp_path) -> Path:
    path = tmp_path / "prompts.csv"
    path.write_text(PROMPTS)
    return path


def generate(model: Path | str, prompts: Path | str, *extra: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "generate_images",
        "--t2i-model",
        str(model),
        "--prompt-set",
        str(prompts),
        *extra,
        stdout=out,
        stderr=err,
    )
    return out.getvalue(), err.getvalue()


SMALL = ("--steps", "2", "--height", "64", "--width", "64", "--guidance", "3.5")


def test_generation_creates_image_rows_with_seeds_and_settings(study, tiny_sd, prompt_csv):
    out, err = generate(
        tiny_sd, prompt_csv, "--per-prompt", "3", "--batch-size", "2", "--study", "gender", *SMALL
    )
    assert "Done: 6 images of tiny-sd stored in study gender" in out
    assert "6/6 images" in err  # the progress meter's last line
    images = list(Image.objects.filter(study=study).select_related("prompt"))
    assert len(images) == 6
    assert {(i.prompt.word, i.index) for i in images} == {
        (w, n) for w in ("lawyer", "taxi driver") for n in range(3)
    }
    for image in images:
        assert image.t2i_model == "tiny-sd"
        assert image.seed == image_seed(t2i_model="tiny-sd", prompt=image.prompt.text, index=image.index)
        assert image.source_path == source_path_for(
            t2i_model="tiny-sd", category="profession", word=image.prompt.word, index=image.index
        )
        assert (image.width, image.height) == (64, 64)
        assert image.params["seed"] == image.seed
        assert image.params["steps"] == 2
        assert image.params["guidance"] == 3.5
        assert image.params["height"] == image.params["width"] == 64
        assert image.params["dtype"] == "float32"
        assert image.params["device"] == "cpu"
        assert image.params["scheduler"] == "DDIMScheduler"
        assert image.params["weights"] == str(tiny_sd)
    assert Prompt.objects.filter(study=study).count() == 2
    assert images[0].source_path.startswith("tiny-sd/profession/")


def test_a_second_run_creates_nothing(study, tiny_sd, prompt_csv):
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", *SMALL)
    before = set(Image.objects.values_list("id", "sha256"))
    out, _ = generate(tiny_sd, prompt_csv, "--per-prompt", "2", *SMALL)
    assert out.startswith("Nothing to do: all 4 images of tiny-sd are already in study gender")
    assert set(Image.objects.values_list("id", "sha256")) == before


def test_an_interrupted_run_resumes_where_it_stopped(study, tiny_sd, prompt_csv):
    model = t2i_model_resolve(str(tiny_sd))
    stops = iter([False, True])
    outcome = generation_run(
        study=study,
        model=model,
        prompts=prompt_set_load(str(prompt_csv)),
        per_prompt=3,
        settings=Settings(batch_size=2, steps=2, height=64, width=64),
        should_stop=lambda: next(stops, True),
    )
    assert outcome.interrupted
    assert outcome.created == Image.objects.count() == 2
    out, _ = generate(
        tiny_sd,
        prompt_csv,
        "--per-prompt",
        "3",
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--height",
        "64",
        "--width",
        "64",
    )
    assert "Done: 4 images" in out
    assert "2 already there" in out
    assert Image.objects.count() == 6


def test_the_same_seed_gives_the_same_image_in_another_study(study, tiny_sd, prompt_csv):
    StudyFactory(slug="replica")
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", "--study", "gender", *SMALL)
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", "--study", "replica", "--batch-size", "1", *SMALL)
    by_study = {
        slug: dict(Image.objects.filter(study__slug=slug).values_list("source_path", "sha256"))
        for slug in ("gender", "replica")
    }
    assert by_study["gender"] == by_study["replica"]
    assert len(set(by_study["gender"].values())) == 4  # different seeds → different images


def test_seed_base_changes_every_seed(study, tiny_sd, prompt_csv):
    a = image_seed(t2i_model="sdxl", prompt="a photo", index=0)
    assert a == image_seed(t2i_model="sdxl", prompt="a photo", index=0)
    assert a != image_seed(t2i_model="sdxl", prompt="a photo", index=0, seed_base=1)
    assert a != image_seed(t2i_model="sd3", prompt="a photo", index=0)
    assert a != image_seed(t2i_model="sdxl", prompt="a photo", index=1)
    assert 0 <= a < 2**63
    # Pinned: changing the rule would silently change every future image.
    assert image_seed(t2i_model="sdxl", prompt="a photo of one real person who is a lawyer", index=0) == (
        PINNED_SEED
    )


#: int.from_bytes(sha256(b"0|sdxl|a photo of one real person who is a lawyer|0").digest()[:8]) >> 1
PINNED_SEED = 2232450716952676013


def test_limit_prompts_and_the_shipped_prompt_set(study, tiny_sd):
    out, _ = generate(tiny_sd, "lyu2025", "--per-prompt", "1", "--limit-prompts", "2", *SMALL)
    assert "Done: 2 images" in out
    assert len(prompt_set_load("lyu2025")) == 100


def test_missing_weights_give_one_error_naming_the_setting(study, prompt_csv):
    with pytest.raises(CommandError, match="BIASLAB_T2I_SDXL_WEIGHTS"):
        generate("sdxl", prompt_csv)
    os.environ["BIASLAB_T2I_SDXL_WEIGHTS"] = "/nonexistent/sdxl"
    try:
        with pytest.raises(CommandError, match="BIASLAB_T2I_SDXL_WEIGHTS"):
            generate("sdxl", prompt_csv)
    finally:
        del os.environ["BIASLAB_T2I_SDXL_WEIGHTS"]
    assert Image.objects.count() == 0


def test_weights_variable_points_a_short_name_at_a_local_folder(study, tiny_sd, prompt_csv, monkeypatch):
    monkeypatch.setenv("BIASLAB_T2I_SDXL_WEIGHTS", str(tiny_sd))
    out, _ = generate("sdxl", prompt_csv, "--per-prompt", "1", *SMALL)
    assert "Done: 2 images of sdxl" in out
    assert set(Image.objects.values_list("t2i_model", flat=True)) == {"sdxl"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("category,word\nprofession,lawyer\n", "missing column.*prompt"),
        ("category,word,prompt\nprofession,,a photo\n", "line 2: empty word"),
        ("category,word,prompt\n", "no prompts"),
        ("", "missing column"),
        ("category,word,prompt\np,w,a\np,w,b\n", "line 3: p/w already on line 2"),
        (b"category,word,prompt\n\xff\xfe,w,p\n", "not UTF-8"),
    ],
)
def test_bad_prompt_sets_are_rejected_clearly(study, tmp_path, content, message):
    path = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(CommandError, match=message):
        generate("sdxl", path)
    assert Image.objects.count() == 0


def test_unknown_prompt_set_lists_the_shipped_ones(study):
    with pytest.raises(CommandError, match=r"No prompt set 'nope'.*lyu2025"):
        generate("sdxl", "nope")


def test_study_is_required_when_there_are_several(db, tiny_sd, prompt_csv):
    StudyFactory(slug="one")
    StudyFactory(slug="two")
    with pytest.raises(CommandError, match=r"Give --study\. Studies: one, two"):
        generate(tiny_sd, prompt_csv)
    with pytest.raises(CommandError, match="No study 'three'"):
        generate(tiny_sd, prompt_csv, "--study", "three")


def test_stop_flag_is_set_by_sigterm_and_restores_the_handler():
    previous = signal.getsignal(signal.SIGTERM)
    with StopFlag(stream=io.StringIO()) as stop:
        assert not stop
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop()
    assert signal.getsignal(signal.SIGTERM) == previous


class ScriptedPipe:
    """Stands in for a diffusers pipeline: solid-colour images from the seed, or an error."""

    def __init__(self, *, fail_on_call: int | None = None, same_image: bool = False) -> None:
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.same_image = same_image

    def __call__(self, prompt, generator, output_type="pil", num_inference_steps=7, guidance_scale=2.0):
        from types import SimpleNamespace

        from PIL import Image as PILImage

        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("CUDA out of memory (scripted)")
        images = []
        for g in generator:
            value = 7 if self.same_image else int(g.initial_seed() % 256)
            images.append(PILImage.new("RGB", (16, 16), (value, 255 - value, 3)))
        return SimpleNamespace(images=images)


def _specs(n: int):
    from detectors.generation import PromptSpec

    return [PromptSpec("profession", f"job{i}", f"a photo of a job{i}") for i in range(n)]


def _model():
    from detectors.generation import ModelSource

    return ModelSource(name="scripted", source="/nowhere", env_var="BIASLAB_T2I_SCRIPTED_WEIGHTS")


def test_a_pipeline_error_ends_the_run_after_storing_earlier_batches(study):
    with pytest.raises(RuntimeError, match="scripted"):
        generation_run(
            study=study,
            model=_model(),
            prompts=_specs(3),
            per_prompt=2,
            settings=Settings(batch_size=2),
            pipe=ScriptedPipe(fail_on_call=2),
        )
    assert Image.objects.count() == 2
    assert Image.objects.first().params["steps"] == 7  # the pipeline's own default, recorded


def test_identical_outputs_are_reported_as_duplicates_not_stored(study):
    warnings: list[str] = []
    outcome = generation_run(
        study=study,
        model=_model(),
        prompts=_specs(2),
        per_prompt=2,
        settings=Settings(batch_size=3),
        pipe=ScriptedPipe(same_image=True),
        on_warning=warnings.append,
    )
    assert (outcome.created, outcome.duplicates, outcome.interrupted) == (1, 3, False)
    assert len(warnings) == 3
    assert "not stored" in warnings[0]
