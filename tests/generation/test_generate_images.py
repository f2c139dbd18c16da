from __future__ import annotations

import io
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from generation.generation import (
    GenerationError,
    PromptSpec,
    Settings,
    generation_plan,
    generation_run,
    image_seed,
    prompt_folder,
    prompt_set_load,
    source_path_for,
    t2i_model_resolve,
    template_seed,
)
from studies.models import Image, Item, ItemImage, Prompt, Question
from studies.progress import StopFlag
from tests.factories import StudyFactory, image_of
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


def test_generation_creates_one_item_per_image_with_seeds_and_settings(study, tiny_sd, prompt_csv):
    out, err = generate(
        tiny_sd, prompt_csv, "--per-prompt", "3", "--batch-size", "2", "--study", "gender", *SMALL
    )
    assert "Done: 6 images of tiny-sd stored in study gender" in out
    assert "6/6 images" in err  # the progress meter's last line
    items = list(Item.objects.filter(study=study).select_related("prompt"))
    assert len(items) == 6
    assert {(i.prompt.word, i.index) for i in items} == {
        (w, n) for w in ("lawyer", "taxi driver") for n in range(3)
    }
    for item in items:
        assert item.t2i_model == "tiny-sd"
        assert item.seed == image_seed(t2i_model="tiny-sd", prompt=item.prompt.text, index=item.index)
        assert item.key == source_path_for(
            t2i_model="tiny-sd", category="profession", word=item.prompt.word, index=item.index
        )
        link = ItemImage.objects.select_related("image").get(item=item)
        assert (link.role, link.source_path) == ("image", item.key)
        assert (link.image.width, link.image.height, link.image.format) == (64, 64, "PNG")
        assert item.metadata == {}
        assert item.params["seed"] == item.seed
        assert item.params["steps"] == 2
        assert item.params["guidance"] == 3.5
        assert item.params["height"] == item.params["width"] == 64
        assert item.params["dtype"] == "float32"
        assert item.params["device"] == "cpu"
        assert item.params["scheduler"] == "DDIMScheduler"
        assert item.params["weights"] == str(tiny_sd)
    assert Prompt.objects.filter(study=study).count() == 2
    assert Image.objects.count() == 6
    assert items[0].key.startswith("tiny-sd/profession/")


def test_extra_prompt_set_columns_become_item_metadata(study, tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text(
        "category,word,prompt,gender,template,\n"
        "profession,lawyer,a photo of a male lawyer,male,a photo of a {gender} {word},\n"
        "profession,nurse,a photo of a nurse,,a photo of a {word},\n"
    )
    prompts = prompt_set_load(str(path))
    assert prompts[0].metadata == {"gender": "male", "template": "a photo of a {gender} {word}"}
    generation_run(
        study=study,
        model=_model(),
        prompts=prompts,
        per_prompt=2,
        settings=Settings(batch_size=2),
        pipe=ScriptedPipe(),
    )
    metadata = {item.key: item.metadata for item in Item.objects.select_related("prompt")}
    assert len(metadata) == 4
    assert metadata["scripted/profession/lawyer/1.png"] == {
        "gender": "male",
        "template": "a photo of a {gender} {word}",
    }
    assert metadata["scripted/profession/nurse/0.png"] == {"gender": "", "template": "a photo of a {word}"}


def test_a_second_run_creates_nothing(study, tiny_sd, prompt_csv):
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", *SMALL)
    before = set(ItemImage.objects.values_list("item_id", "image_id", "image__sha256"))
    out, _ = generate(tiny_sd, prompt_csv, "--per-prompt", "2", *SMALL)
    assert out.startswith("Nothing to do: all 4 images of tiny-sd are already in study gender")
    assert set(ItemImage.objects.values_list("item_id", "image_id", "image__sha256")) == before


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
    assert outcome.created == Item.objects.count() == Image.objects.count() == 2
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
    assert Item.objects.count() == 6


def test_the_same_seed_gives_the_same_image_in_another_study_stored_once(study, tiny_sd, prompt_csv):
    StudyFactory(slug="replica")
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", "--study", "gender", *SMALL)
    generate(tiny_sd, prompt_csv, "--per-prompt", "2", "--study", "replica", "--batch-size", "1", *SMALL)
    by_study = {
        slug: dict(
            ItemImage.objects.filter(item__study__slug=slug).values_list("source_path", "image__sha256")
        )
        for slug in ("gender", "replica")
    }
    assert by_study["gender"] == by_study["replica"]
    assert len(set(by_study["gender"].values())) == 4  # different seeds → different images
    assert Image.objects.count() == 4  # one file each, shared by the two studies' items
    assert Item.objects.count() == 8


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
    assert Item.objects.count() == 0


def test_weights_variable_points_a_short_name_at_a_local_folder(study, tiny_sd, prompt_csv, monkeypatch):
    monkeypatch.setenv("BIASLAB_T2I_SDXL_WEIGHTS", str(tiny_sd))
    out, _ = generate("sdxl", prompt_csv, "--per-prompt", "1", *SMALL)
    assert "Done: 2 images of sdxl" in out
    assert set(Item.objects.values_list("t2i_model", flat=True)) == {"sdxl"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("category,word\nprofession,lawyer\n", "missing column.*prompt"),
        ("category,word,prompt\nprofession,,a photo\n", "line 2: empty word"),
        ("category,word,prompt\n", "no prompts"),
        ("", "missing column"),
        ("category,word,prompt\np,w,a photo\nq,v,a photo\n", "line 3: prompt .a photo. already on line 2"),
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
    assert Item.objects.count() == 0


def test_unknown_prompt_set_lists_the_shipped_ones(study):
    with pytest.raises(CommandError, match=r"No prompt set 'nope'.*lyu2025"):
        generate("sdxl", "nope")


def test_study_is_required_when_there_are_several(db, tiny_sd, prompt_csv):
    StudyFactory(slug="one")
    StudyFactory(slug="two")
    with pytest.raises(
        CommandError, match=r"several studies: choose one with --study \(existing studies: one, two\)"
    ):
        generate(tiny_sd, prompt_csv)
    with pytest.raises(CommandError, match="No study with slug 'three'"):
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
    from generation.generation import PromptSpec

    return [PromptSpec("profession", f"job{i}", f"a photo of a job{i}") for i in range(n)]


def _model():
    from generation.generation import ModelSource

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
    assert Item.objects.count() == 2
    assert Item.objects.first().params["steps"] == 7  # the pipeline's own default, recorded


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
    assert (Item.objects.count(), Image.objects.count()) == (1, 1)


def test_generated_items_are_what_run_detectors_predicts(study):
    import io as _io

    from detectors.models import Prediction
    from tests.fakes import registered_fake

    generation_run(
        study=study,
        model=_model(),
        prompts=_specs(2),
        per_prompt=2,
        settings=Settings(batch_size=2),
        pipe=ScriptedPipe(),
    )
    with registered_fake():
        call_command(
            "run_detectors",
            "--detector",
            "fake",
            "--t2i-model",
            "scripted",
            stdout=_io.StringIO(),
            stderr=_io.StringIO(),
        )
    assert {p.image_id for p in Prediction.objects.all()} == {
        image_of(item).pk for item in Item.objects.all()
    }


# --- seed policies and prompt sets with extra columns ---------------------------------


def _mannering(n_templates: int):
    specs = prompt_set_load("mannering2023")
    templates = list(dict.fromkeys(spec.metadata["template"] for spec in specs))[:n_templates]
    return [spec for spec in specs if spec.metadata["template"] in templates]


def _seeds_by_template(jobs) -> dict[tuple[str, int], set[int]]:
    by: dict[tuple[str, int], set[int]] = {}
    for job in jobs:
        by.setdefault((job.spec.metadata["template"], job.index), set()).add(job.seed)
    return by


def test_seed_by_template_gives_every_gender_word_of_a_template_the_same_seeds(study):
    jobs, _ = generation_plan(
        study=study, t2i_model="sd2", prompts=_mannering(3), per_prompt=3, seed_by="template"
    )
    assert len(jobs) == 3 * 4 * 3
    by = _seeds_by_template(jobs)
    assert all(len(seeds) == 1 for seeds in by.values())  # man, woman, boy, girl: one seed
    distinct = {next(iter(seeds)) for seeds in by.values()}
    assert len(distinct) == 9  # but another per template and per index
    for job in jobs:
        template = job.spec.metadata["template"]
        assert job.seed == template_seed(t2i_model="sd2", template=template, index=job.index)


def test_default_seeds_still_hash_the_whole_prompt(study):
    jobs, _ = generation_plan(study=study, t2i_model="sd2", prompts=_mannering(1), per_prompt=2)
    for job in jobs:
        assert job.seed == image_seed(t2i_model="sd2", prompt=job.spec.text, index=job.index)
    assert len({job.seed for job in jobs}) == 8  # man and woman no longer share noise


def test_template_seed_is_pinned():
    # Pinned: changing it would silently change every paired image of an objects study.
    assert template_seed(t2i_model="sdxl", template="0", index=0) == PINNED_TEMPLATE_SEED
    assert template_seed(t2i_model="sdxl", template="0", index=0) != image_seed(
        t2i_model="sdxl", prompt="0", index=0
    )
    assert template_seed(t2i_model="sdxl", template="0", index=0, seed_base=1) != PINNED_TEMPLATE_SEED


#: int.from_bytes(sha256(b"0|sdxl|template=0|0").digest()[:8]) >> 1
PINNED_TEMPLATE_SEED = 1528800041551435918


def test_seed_by_template_on_the_tiny_pipeline_pairs_the_gender_words(study, tiny_sd):
    out, _ = generate(
        tiny_sd, "mannering2023", "--seed-by", "template", "--limit-prompts", "4", "--per-prompt", "2", *SMALL
    )
    assert "Done: 8 images" in out
    items = list(Item.objects.filter(study=study).select_related("prompt"))
    by_index: dict[int, set[int]] = {}
    for item in items:
        by_index.setdefault(item.index, set()).add(item.seed)
        assert item.metadata["template"] == "0"
        assert item.params["seed_by"] == "template"
        assert "template=<template>" in item.params["seed_rule"]
    assert {index: len(seeds) for index, seeds in by_index.items()} == {0: 1, 1: 1}
    # Same noise, different words: four different images per index, none refused as a duplicate.
    assert Image.objects.count() == 8


def test_seed_by_template_needs_a_template_on_every_prompt(study, prompt_csv):
    with pytest.raises(CommandError, match=r"--seed-by template needs a 'template' column.*2 prompt"):
        generate("sdxl", prompt_csv, "--seed-by", "template")
    with pytest.raises(CommandError, match="invalid choice"):
        generate("sdxl", prompt_csv, "--seed-by", "word")
    assert Item.objects.count() == 0


def test_a_study_started_under_one_seed_policy_refuses_another(study):
    one_prompt = _mannering(1)[:1]
    run = dict(study=study, model=_model(), prompts=one_prompt, per_prompt=2, pipe=ScriptedPipe())
    assert generation_run(**run, settings=Settings()).created == 2
    pipe = ScriptedPipe()
    with pytest.raises(GenerationError, match=r"2 image\(s\) of scripted .* other seeds than planned"):
        generation_run(**{**run, "pipe": pipe}, settings=Settings(seed_by="template"))
    assert (Item.objects.count(), pipe.calls) == (2, 0)
    # The policy they were made with resumes normally.
    assert generation_run(**{**run, "per_prompt": 3}, settings=Settings()).created == 1


def test_a_prompt_already_stored_under_another_path_is_not_generated_again(study):
    spec = PromptSpec("scene", "kitchen", "a man in a kitchen")
    generation_run(
        study=study, model=_model(), prompts=[spec], per_prompt=2, settings=Settings(), pipe=ScriptedPipe()
    )
    moved = replace(spec, folder=prompt_folder(spec.text))  # the set gained a second kitchen prompt
    pipe = ScriptedPipe()
    outcome = generation_run(
        study=study, model=_model(), prompts=[moved], per_prompt=3, settings=Settings(), pipe=pipe
    )
    assert (outcome.skipped, outcome.created) == (2, 1)
    assert sorted(Item.objects.values_list("key", flat=True)) == [
        "scripted/scene/kitchen/0.png",
        "scripted/scene/kitchen/1.png",
        f"scripted/scene/kitchen/{moved.folder}/2.png",
    ]


def test_gep2023_generates_on_the_tiny_pipeline_and_explicit_items_ask_only_their_attribute(tiny_sd):
    gep_study = StudyFactory(slug="gep", protocol="attributes")
    specs = prompt_set_load("gep2023")
    chosen = specs[:2] + [s for s in specs if s.metadata["attribute"] == "boots"][:2]
    assert [s.category for s in chosen] == ["neutral", "neutral", "explicit", "explicit"]
    assert {s.word for s in chosen} == {"sitting at a table"}
    run = dict(
        study=gep_study,
        model=t2i_model_resolve(str(tiny_sd)),
        prompts=chosen,
        per_prompt=1,
        settings=Settings(batch_size=2, steps=2, height=64, width=64),
        prompt_set="gep2023",
    )
    assert generation_run(**run).created == 4
    items = {item.prompt.text: item for item in Item.objects.filter(study=gep_study).select_related("prompt")}
    assert set(items) == {s.text for s in chosen}
    for spec in chosen:
        item = items[spec.text]
        assert item.metadata == spec.metadata
        assert item.key == f"tiny-sd/{spec.category}/sitting_at_a_table/{spec.folder}/0.png"
        assert item.params["prompt_set"] == "gep2023"
    assert items["A woman sitting at a table."].question_keys == []
    assert items["A woman in boots sitting at a table."].question_keys == ["boots"]
    assert items["A man in boots sitting at a table."].question_keys == ["boots"]
    again = generation_run(**run)
    assert (again.created, again.skipped) == (0, 4)


def test_a_question_the_study_lacks_is_refused_before_anything_is_generated(db):
    gep_study = StudyFactory(slug="gep", protocol="attributes")
    Question.objects.filter(study=gep_study, key="boots").delete()
    boots = [s for s in prompt_set_load("gep2023") if s.metadata["attribute"] == "boots"][:1]
    pipe = ScriptedPipe()
    with pytest.raises(GenerationError, match=r"would ask question 'boots', which study gep does not have"):
        generation_run(
            study=gep_study, model=_model(), prompts=boots, per_prompt=1, settings=Settings(), pipe=pipe
        )
    assert (Item.objects.count(), pipe.calls) == (0, 0)


def test_an_objects_prompt_without_gender_is_refused_before_anything_is_generated(db, tmp_path):
    objects_study = StudyFactory(slug="cooccur", protocol="objects")
    mannering = prompt_set_load("mannering2023")[:2]
    assert {spec.metadata["gender"] for spec in mannering} <= {"male", "female"}
    own = tmp_path / "own.csv"
    own.write_text("prompt,category,word\nA person holding an item,holding,item\n", encoding="utf-8")
    pipe = ScriptedPipe()
    with pytest.raises(
        GenerationError,
        match=r"prompt 'A person holding an item': metadata gender is missing: an objects item needs",
    ):
        generation_run(
            study=objects_study,
            model=_model(),
            prompts=[*mannering, *prompt_set_load(str(own))],
            per_prompt=1,
            settings=Settings(),
            pipe=pipe,
        )
    assert (Item.objects.count(), pipe.calls) == (0, 0)
