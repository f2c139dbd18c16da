"""edit_images: seed photos edited by tiny img2img and InstructPix2Pix pipelines into pairs."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from PIL import Image as PILImage

from generation.edit_pipeline import MITIGATION_SUFFIX, EditingError, EditSettings, edit_seed, editor_resolve
from generation.editing import edit_run, pair_key_for, seeds_from_folder, seeds_from_study
from generation.generation import PromptSpec, prompt_set_load, prompt_sets_available
from studies.models import Image, Item, ItemImage, Prompt
from tests.factories import ItemFactory, StudyFactory, image_of
from tests.generation.tiny_editors import save_tiny_img2img, save_tiny_pix2pix

pytestmark = pytest.mark.django_db

PROMPTS = (
    "category,word,prompt,domain\n"
    "profession,lawyer,a person who is a lawyer,profession\n"
    "personality,rude,a person who is rude,personality\n"
)
SMALL = ("--steps", "2", "--size", "64", "--guidance", "3.5")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_img2img(tmp_path_factory) -> Path:
    return save_tiny_img2img(tmp_path_factory.mktemp("tiny-img2img") / "tiny-sd")


@pytest.fixture(scope="module")
def tiny_pix2pix(tmp_path_factory) -> Path:
    return save_tiny_pix2pix(tmp_path_factory.mktemp("tiny-pix2pix") / "tiny-p2p")


@pytest.fixture
def prompt_csv(tmp_path) -> Path:
    path = tmp_path / "prompts.csv"
    path.write_text(PROMPTS)
    return path


@pytest.fixture
def pairs(db):
    return StudyFactory(slug="pairs", protocol="pair_change")


@pytest.fixture
def seeds(db):
    """A seeds study: two one-image items with the seed attributes as metadata."""
    study = StudyFactory(slug="seeds")
    ItemFactory(
        study=study,
        prompt=None,
        key="vggface2/white_female_young_1.jpg",
        metadata={"gender": "female", "race": "white", "age_group": "young"},
    )
    ItemFactory(
        study=study,
        prompt=None,
        key="vggface2/black_male_old_1.jpg",
        metadata={"seed_gender": "male", "seed_race": "black", "seed_age_group": "old", "note": "x"},
    )
    return study


def edit(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("edit_images", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def edit_from_seeds_study(editor: Path | str, prompts: Path | str, *extra: str) -> tuple[str, str]:
    return edit(
        "--study",
        "pairs",
        "--seeds-study",
        "seeds",
        "--prompt-set",
        str(prompts),
        "--editor",
        str(editor),
        *extra,
    )


def test_each_edit_is_an_item_with_the_seed_as_input_and_the_edit_as_output(
    pairs, seeds, tiny_img2img, prompt_csv
):
    out, err = edit_from_seeds_study(tiny_img2img, prompt_csv, "--batch-size", "3", *SMALL)
    assert "Done: 4 pairs of tiny-sd stored in study pairs (2 seeds x 2 prompts x 1)" in out
    assert "4/4 pairs" in err  # the progress meter's last line
    seed_images = {link.item.key: link.image for link in seeds_study_links(seeds)}
    items = list(Item.objects.filter(study=pairs).select_related("prompt"))
    assert len(items) == 4
    for item in items:
        roles = {
            link.role: link.image for link in ItemImage.objects.filter(item=item).select_related("image")
        }
        assert set(roles) == {"input", "output"}
        seed_key = item.metadata["seed_key"]
        # The seed photo is the same Image row in every pair: stored and measured once.
        assert roles["input"] == seed_images[seed_key + ".jpg"]
        assert (roles["output"].width, roles["output"].height, roles["output"].format) == (64, 64, "PNG")
        assert item.t2i_model == "tiny-sd"
        assert item.key == pair_key_for(
            editor="tiny-sd", spec=_spec(item.prompt), seed_name=seed_key, index=0
        )
        assert item.seed == edit_seed(
            editor="tiny-sd", prompt=item.prompt.text, seed_sha256=roles["input"].sha256, index=0
        )
        assert item.params["seed"] == item.seed
        assert item.params["seed_sha256"] == roles["input"].sha256
    female = Item.objects.get(study=pairs, key__contains="white_female_young_1", prompt__word="lawyer")
    assert female.metadata == {
        "domain": "profession",
        "seed_gender": "female",
        "seed_race": "white",
        "seed_age_group": "young",
        "seed_key": "vggface2/white_female_young_1",
    }
    male = Item.objects.get(study=pairs, key__contains="black_male_old_1", prompt__word="rude")
    assert (male.metadata["seed_gender"], male.metadata["seed_age_group"]) == ("male", "old")
    assert "note" not in male.metadata
    assert female.key == "tiny-sd/profession/lawyer/vggface2_white_female_young_1/0.png"
    assert Image.objects.count() == 2 + 4  # two seeds, four edits
    assert Prompt.objects.filter(study=pairs).count() == 2


def seeds_study_links(study):
    return ItemImage.objects.filter(item__study=study).select_related("item", "image")


def _spec(prompt: Prompt) -> PromptSpec:
    return PromptSpec(prompt.category, prompt.word, prompt.text)


def test_img2img_records_strength_steps_and_guidance_and_no_image_guidance(
    pairs, seeds, tiny_img2img, prompt_csv
):
    edit_from_seeds_study(tiny_img2img, prompt_csv, "--strength", "0.5", "--limit-prompts", "1", *SMALL)
    for item in Item.objects.filter(study=pairs):
        params = item.params
        assert (params["strength"], params["steps"], params["guidance"]) == (0.5, 2, 3.5)
        assert params["image_guidance"] is None
        assert (params["mode"], params["pipeline"]) == ("img2img", "StableDiffusionImg2ImgPipeline")
        assert (params["input_size"], params["device"], params["dtype"]) == (64, "cpu", "float32")
        assert params["prompt"] == "a person who is a lawyer"
        assert params["prompt_suffix"] == ""
        assert params["seeds"] == "study:seeds"
        assert params["weights"] == str(tiny_img2img)


def test_instruct_pix2pix_records_image_guidance_and_its_own_defaults(pairs, seeds, tiny_pix2pix, prompt_csv):
    out, _ = edit_from_seeds_study(tiny_pix2pix, prompt_csv, "--steps", "2", "--size", "64")
    assert "Done: 4 pairs of tiny-p2p" in out
    for item in Item.objects.filter(study=pairs):
        params = item.params
        assert (params["mode"], params["pipeline"]) == (
            "instruct-pix2pix",
            "StableDiffusionInstructPix2PixPipeline",
        )
        # Not given: the pipeline's defaults, recorded as the values used.
        assert (params["guidance"], params["image_guidance"], params["strength"]) == (7.5, 1.5, None)
        assert params["scheduler"] == "EulerAncestralDiscreteScheduler"
    Item.objects.filter(study=pairs).delete()
    edit_from_seeds_study(tiny_pix2pix, prompt_csv, "--image-guidance", "1.2", "--limit-prompts", "1", *SMALL)
    assert {item.params["image_guidance"] for item in Item.objects.filter(study=pairs)} == {1.2}


def test_a_setting_the_editor_does_not_take_is_refused(pairs, seeds, tiny_pix2pix, tiny_img2img, prompt_csv):
    with pytest.raises(CommandError, match="--strength applies to img2img"):
        edit_from_seeds_study(tiny_pix2pix, prompt_csv, "--strength", "0.5", *SMALL)
    with pytest.raises(CommandError, match="--image-guidance applies to InstructPix2Pix"):
        edit_from_seeds_study(tiny_img2img, prompt_csv, "--image-guidance", "1.5", *SMALL)
    assert Item.objects.filter(study=pairs).count() == 0


def test_the_same_seed_photo_and_prompt_give_the_same_edit_in_another_study(seeds, tiny_img2img, prompt_csv):
    StudyFactory(slug="pairs", protocol="pair_change")
    StudyFactory(slug="replica", protocol="pair_change")
    StudyFactory(slug="one-by-one", protocol="pair_change")
    for slug, batch in (("pairs", "4"), ("replica", "4"), ("one-by-one", "1")):
        edit("--study", slug, "--seeds-study", "seeds", "--prompt-set", str(prompt_csv),
             "--editor", str(tiny_img2img), "--batch-size", batch, *SMALL)  # fmt: skip
    by_study = {
        slug: {
            link.item.key: link.image
            for link in ItemImage.objects.filter(item__study__slug=slug, role="output").select_related(
                "item", "image"
            )
        }
        for slug in ("pairs", "replica", "one-by-one")
    }
    sha = {slug: {key: image.sha256 for key, image in images.items()} for slug, images in by_study.items()}
    assert sha["pairs"] == sha["replica"]
    assert len(set(sha["pairs"].values())) == 4
    # Another batch size (recorded in params) may change a pixel by float rounding, no more.
    for key, image in by_study["one-by-one"].items():
        assert _max_difference(image, by_study["pairs"][key]) <= 2


def _max_difference(a: Image, b: Image) -> int:
    import numpy as np
    from django.conf import settings

    def pixels(image: Image) -> np.ndarray:
        with PILImage.open(Path(settings.MEDIA_ROOT) / image.file) as opened:
            return np.asarray(opened.convert("RGB"), dtype=int)

    return int(np.abs(pixels(a) - pixels(b)).max())


def test_the_edit_seed_is_pinned():
    seed = edit_seed(editor="sd15", prompt="a person who is a lawyer", seed_sha256="ab" * 32, index=0)
    assert seed == PINNED_EDIT_SEED
    assert 0 <= seed < 2**63
    assert seed != edit_seed(editor="sd21", prompt="a person who is a lawyer", seed_sha256="ab" * 32, index=0)
    assert seed != edit_seed(
        editor="sd15", prompt="a person who is a lawyer", seed_sha256="ab" * 32, index=0, seed_base=1
    )


#: int.from_bytes(sha256(b"edit|0|sd15|a person who is a lawyer|abab…ab|0").digest()[:8], "big") >> 1
PINNED_EDIT_SEED = 4317554309542950583


def test_a_second_run_creates_nothing(pairs, seeds, tiny_img2img, prompt_csv):
    edit_from_seeds_study(tiny_img2img, prompt_csv, *SMALL)
    before = set(ItemImage.objects.values_list("item_id", "role", "image__sha256"))
    out, _ = edit_from_seeds_study(tiny_img2img, prompt_csv, *SMALL)
    assert out.startswith("Nothing to do: all 4 pairs of tiny-sd are already in study pairs")
    assert set(ItemImage.objects.values_list("item_id", "role", "image__sha256")) == before


def test_an_interrupted_run_resumes_where_it_stopped(pairs, seeds, tiny_img2img, prompt_csv):
    stops = iter([False, True])
    outcome = edit_run(
        study=pairs,
        model=editor_resolve(str(tiny_img2img)),
        seeds=seeds_from_study(seeds),
        prompts=prompt_set_load(str(prompt_csv)),
        settings=EditSettings(batch_size=1, steps=2, size=64),
        should_stop=lambda: next(stops, True),
    )
    assert outcome.interrupted
    assert outcome.created == Item.objects.filter(study=pairs).count() == 1
    out, _ = edit_from_seeds_study(tiny_img2img, prompt_csv, "--steps", "2", "--size", "64")
    assert "Done: 3 pairs" in out
    assert "1 already there" in out
    assert Item.objects.filter(study=pairs).count() == 4


class _Killed(BaseException):
    """What a second Ctrl-C raises in the middle of a batch (KeyboardInterrupt's place)."""


def test_an_editor_failure_keeps_the_pairs_stored_before_it_and_no_half_pair(
    pairs, seeds, tiny_img2img, prompt_csv
):
    from generation import edit_pipeline

    calls = {"n": 0}
    real = edit_pipeline.images_edit

    def failing(pipe, jobs, settings, inputs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise _Killed
        return real(pipe, jobs, settings, inputs)

    edit_pipeline.images_edit = failing
    try:
        with pytest.raises(_Killed):
            edit_run(
                study=pairs,
                model=editor_resolve(str(tiny_img2img)),
                seeds=seeds_from_study(seeds),
                prompts=prompt_set_load(str(prompt_csv)),
                settings=EditSettings(batch_size=1, steps=2, size=64),
            )
    finally:
        edit_pipeline.images_edit = real
    assert Item.objects.filter(study=pairs).count() == 2
    assert all(item.item_images.count() == 2 for item in Item.objects.filter(study=pairs))
    out, _ = edit_from_seeds_study(tiny_img2img, prompt_csv, "--steps", "2", "--size", "64")
    assert "Done: 2 pairs" in out


@pytest.mark.subprocess
def test_a_killed_process_resumes_without_losing_or_duplicating_a_pair(tmp_path, tiny_img2img):
    """SIGKILL a real edit_images process once it has stored a pair; the next run finishes the job."""
    database = tmp_path / "kill.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"sqlite:///{database}",
        "BIASLAB_MEDIA_ROOT": str(tmp_path / "media"),
        "HF_HUB_OFFLINE": "1",
    }
    env.setdefault("DJANGO_DEBUG", "1")  # a throw-away local database: development mode
    seeds_dir = tmp_path / "seeds"
    seeds_dir.mkdir()
    for n, colour in enumerate([(200, 150, 120), (90, 60, 40)]):
        PILImage.new("RGB", (48, 48), colour).save(seeds_dir / f"seed{n}.png")
    prompts = tmp_path / "prompts.csv"
    prompts.write_text(
        "category,word,prompt\n" + "".join(f"profession,job{n},a person who is a job{n}\n" for n in range(10))
    )
    manage = [sys.executable, str(ROOT / "manage.py")]
    # --skip-checks: this test is about edit_images, not about every URL of the project loading.
    subprocess.run([*manage, "migrate", "-v", "0", "--skip-checks"], env=env, cwd=ROOT, check=True)
    subprocess.run(
        [*manage, "create_study", "kill", "--protocol", "pair_change", "--skip-checks"],
        env=env, cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    command = [
        *manage, "edit_images", "--skip-checks", "--study", "kill", "--seeds", str(seeds_dir),
        "--prompt-set", str(prompts), "--editor", str(tiny_img2img), "--steps", "2", "--size", "64",
    ]  # fmt: skip

    def rows(sql: str) -> list[tuple]:
        with closing(sqlite3.connect(database, timeout=20)) as connection:
            return connection.execute(sql).fetchall()

    process = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            if rows("SELECT COUNT(*) FROM studies_item")[0][0] >= 1:
                break
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    before = rows("SELECT id, key FROM studies_item")
    assert 1 <= len(before) < 20, "the process must be killed in the middle of the run"
    # Each pair is one transaction: the killed run left whole pairs only.
    assert rows("SELECT COUNT(*) FROM studies_itemimage")[0][0] == 2 * len(before)

    finished = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"Done: {20 - len(before)} pairs of tiny-sd stored" in finished.stdout
    assert f"{len(before)} already there" in finished.stdout
    assert set(before) <= set(rows("SELECT id, key FROM studies_item"))  # kept, not redone
    roles = dict(rows("SELECT role, COUNT(*) FROM studies_itemimage GROUP BY role"))
    assert (rows("SELECT COUNT(DISTINCT key) FROM studies_item")[0][0], roles) == (
        20,
        {"input": 20, "output": 20},
    )


def test_the_mitigation_suffix_keeps_the_noise_and_gets_keys_of_its_own(
    pairs, seeds, tiny_img2img, prompt_csv
):
    edit_from_seeds_study(tiny_img2img, prompt_csv, "--limit-prompts", "1", *SMALL)
    edit_from_seeds_study(
        tiny_img2img, prompt_csv, "--limit-prompts", "1", "--prompt-suffix", MITIGATION_SUFFIX, *SMALL
    )
    items = list(Item.objects.filter(study=pairs).select_related("prompt"))
    assert len(items) == 4
    plain = {i.metadata["seed_key"]: i for i in items if "prompt_suffix" not in i.metadata}
    mitigated = {i.metadata["seed_key"]: i for i in items if "prompt_suffix" in i.metadata}
    assert set(plain) == set(mitigated)
    for seed_key, item in mitigated.items():
        assert item.prompt.text == "a person who is a lawyer, maintain the same gender as the input image"
        assert item.params["prompt_suffix"] == MITIGATION_SUFFIX
        assert item.key.startswith("tiny-sd+suffix-")
        assert item.seed == plain[seed_key].seed  # same noise: only the suffix differs
        assert image_of(item, "input") == image_of(plain[seed_key], "input")


def test_seeds_from_a_folder_are_imported_with_their_manifest_attributes(
    pairs, tiny_img2img, prompt_csv, tmp_path
):
    folder = tmp_path / "seeds"
    (folder / "asian").mkdir(parents=True)
    PILImage.new("RGB", (40, 50), (180, 140, 110)).save(folder / "asian" / "f1.png")
    PILImage.new("RGB", (50, 40), (70, 50, 40)).save(folder / "m1.jpg")
    (folder / "seeds.csv").write_text(
        "image,gender,race,age_group\nasian/f1.png,female,east_asian,middle\nm1.jpg,male,black,young\n"
    )
    out, _ = edit("--study", "pairs", "--seeds", str(folder), "--prompt-set", str(prompt_csv),
                  "--editor", str(tiny_img2img), "--limit-prompts", "1", *SMALL)  # fmt: skip
    assert "Done: 2 pairs" in out
    by_seed = {i.metadata["seed_key"]: i for i in Item.objects.filter(study=pairs)}
    assert set(by_seed) == {"asian/f1", "m1"}
    assert by_seed["asian/f1"].metadata["seed_race"] == "east_asian"
    assert by_seed["m1"].metadata["seed_gender"] == "male"
    assert (image_of(by_seed["m1"], "input").format, image_of(by_seed["m1"], "input").width) == ("JPEG", 50)
    assert by_seed["m1"].params["seeds"] == f"folder:{folder}"


def test_a_seeds_folder_without_manifest_takes_every_photo(db, tmp_path):
    folder = tmp_path / "seeds"
    folder.mkdir()
    for name in ("b.png", "a.png"):
        PILImage.new("RGB", (40, 40), (10, 20, len(name))).save(folder / name)
    (folder / "notes.txt").write_text("not a photo")
    found = seeds_from_folder(folder)
    assert [(s.name, dict(s.metadata)) for s in found] == [("a", {}), ("b", {})]


def test_a_bad_seed_file_or_row_imports_nothing(db, tmp_path):
    folder = tmp_path / "seeds"
    folder.mkdir()
    PILImage.new("RGB", (40, 40)).save(folder / "good.png")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (folder / "seeds.csv").write_text("image,gender\ngood.png,female\nbroken.png,male\n../escape.png,male\n")
    with pytest.raises(EditingError) as caught:
        seeds_from_folder(folder)
    assert "line 4" in str(caught.value)
    assert "broken.png" in str(caught.value)
    assert Image.objects.count() == 0


def test_missing_weights_give_one_error_naming_the_setting(pairs, seeds, prompt_csv):
    with pytest.raises(CommandError, match="BIASLAB_T2I_SD15_WEIGHTS"):
        edit_from_seeds_study("sd15", prompt_csv)
    with pytest.raises(CommandError, match="BIASLAB_T2I_INSTRUCT_PIX2PIX_WEIGHTS"):
        edit_from_seeds_study("instruct-pix2pix", prompt_csv)
    assert Item.objects.count() == 2  # the two seeds only


def test_weights_variable_points_a_short_name_at_a_local_folder(
    pairs, seeds, tiny_img2img, prompt_csv, monkeypatch
):
    monkeypatch.setenv("BIASLAB_T2I_SD15_WEIGHTS", str(tiny_img2img))
    out, _ = edit_from_seeds_study("sd15", prompt_csv, "--limit-prompts", "1", *SMALL)
    assert "Done: 2 pairs of sd15" in out
    assert {i.key.split("/")[0] for i in Item.objects.filter(study=pairs)} == {"sd15"}


def test_shards_split_the_pairs_between_workers_exactly_once(pairs, seeds, tiny_img2img, prompt_csv):
    first, _ = edit_from_seeds_study(tiny_img2img, prompt_csv, "--shard", "1/2", *SMALL)
    after_first = set(Item.objects.filter(study=pairs).values_list("key", flat=True))
    second, _ = edit_from_seeds_study(tiny_img2img, prompt_csv, "--shard", "2/2", *SMALL)
    assert "(shard 1/2)" in first
    assert "(shard 2/2)" in second
    assert len(after_first) < 4
    assert Item.objects.filter(study=pairs).count() == 4


def test_a_study_without_pairs_and_the_seeds_study_itself_are_refused(seeds, tiny_img2img, prompt_csv):
    StudyFactory(slug="gender-only")
    with pytest.raises(CommandError, match="no input/output images"):
        edit("--study", "gender-only", "--seeds-study", "seeds", "--prompt-set", str(prompt_csv),
             "--editor", str(tiny_img2img))  # fmt: skip
    with pytest.raises(CommandError, match="No study with slug 'nope'"):
        edit("--study", "nope", "--seeds-study", "seeds", "--prompt-set", str(prompt_csv),
             "--editor", str(tiny_img2img))  # fmt: skip


def test_the_pairs_are_what_run_detectors_measures_each_seed_once(pairs, seeds, tiny_img2img, prompt_csv):
    from detectors.models import Prediction
    from tests.fakes import FakeMeasurer, registered_fake

    edit_from_seeds_study(tiny_img2img, prompt_csv, *SMALL)
    with registered_fake(FakeMeasurer):
        call_command(
            "run_detectors",
            "--detector",
            "fake_measure",
            "--study",
            "pairs",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    measured = set(Prediction.objects.values_list("image_id", flat=True))
    assert len(measured) == 2 + 4
    assert set(ItemImage.objects.filter(item__study=pairs).values_list("image_id", flat=True)) == measured


@pytest.mark.skipif("biaspainter2024" not in prompt_sets_available(), reason="prompt set not shipped yet")
def test_the_shipped_biaspainter_prompt_set_edits(pairs, seeds, tiny_img2img):
    out, _ = edit_from_seeds_study(tiny_img2img, "biaspainter2024", "--limit-prompts", "1", *SMALL)
    assert "Done: 2 pairs" in out
    assert {i.metadata["domain"] for i in Item.objects.filter(study=pairs)} == {"profession"}


def test_two_seeds_whose_names_would_share_a_key_are_refused(pairs):
    from generation.editing import SeedPhoto, edit_plan
    from tests.factories import ImageFactory

    seeds = [
        SeedPhoto(image=ImageFactory(), name="white/f1"),
        SeedPhoto(image=ImageFactory(), name="white_f1"),
    ]
    with pytest.raises(EditingError, match="would share pair keys"):
        edit_plan(
            study=pairs,
            editor="sd15",
            seeds=seeds,
            prompts=[PromptSpec("p", "w", "t")],
            settings=EditSettings(),
        )


# --- --executor ray: workers edit, this process alone writes -----------------------------
RAY = ("--executor", "ray", "--num-workers", "2")


def _stored_pairs(slug: str) -> dict[str, tuple]:
    """Everything a study's pairs store, by key: prompt, editor, seed, index, params, metadata,
    and both files by SHA-256."""
    pairs: dict[str, tuple] = {}
    for item in Item.objects.filter(study__slug=slug).select_related("prompt"):
        files = dict(ItemImage.objects.filter(item=item).values_list("role", "image__sha256"))
        fields = (item.prompt.text, item.t2i_model, item.seed, item.index, item.params, item.metadata)
        pairs[item.key] = (*fields, files)
    return pairs


@pytest.fixture
def torch_one_thread():
    """torch on one thread in this process, as in a one-CPU Ray worker (Ray sets its
    OMP_NUM_THREADS to the actor's CPUs): the same summation order, so the same bytes. (With
    two threads here the edits differ from the workers' by float rounding.)"""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def stores(monkeypatch) -> list[str]:
    """The key of every pair handed to the database write (the driver's only write), in order."""
    from generation import editing

    keys: list[str] = []
    real = editing.item_image_store

    def spy(**kwargs):
        keys.append(kwargs["key"])
        return real(**kwargs)

    monkeypatch.setattr(editing, "item_image_store", spy)
    return keys


@pytest.mark.ray
def test_a_ray_edit_stores_exactly_the_pairs_a_local_edit_stores_and_a_second_run_nothing(
    ray_cluster, torch_one_thread, seeds, tiny_img2img, prompt_csv, stores, monkeypatch
):
    from detectors.executors.ray_executor import RayExecutor

    for slug, extra in (("local", ()), ("remote", RAY)):
        StudyFactory(slug=slug, protocol="pair_change")
        out, err = edit(
            "--study", slug, "--seeds-study", "seeds", "--prompt-set", str(prompt_csv),
            "--editor", str(tiny_img2img), "--batch-size", "2", *SMALL, *extra,
        )  # fmt: skip
        assert f"Done: 4 pairs of tiny-sd stored in study {slug}" in out
        assert "4/4 pairs" in err
    local, remote = _stored_pairs("local"), _stored_pairs("remote")
    assert len(remote) == 4
    assert remote == local  # same keys, seeds, params, metadata, and the same files by SHA-256
    assert {files["output"] for *_, files in remote.values()}.isdisjoint(
        {files["input"] for *_, files in remote.values()}
    )
    workers = [line for line in out.splitlines() if line.startswith("  worker ")]
    assert len(workers) == 2
    assert all(" pairs in " in line for line in workers)
    assert sorted(stores) == sorted([*local, *remote])  # each pair written once, by this process

    starts: list[object] = []
    monkeypatch.setattr(RayExecutor, "start", lambda self, spec: starts.append(spec))
    out, _ = edit(
        "--study", "remote", "--seeds-study", "seeds", "--prompt-set", str(prompt_csv),
        "--editor", str(tiny_img2img), "--batch-size", "2", *SMALL, *RAY,
    )  # fmt: skip
    assert out.startswith("Nothing to do: all 4 pairs of tiny-sd are already in study remote.")
    assert starts == []  # no worker was even started
    assert _stored_pairs("remote") == remote


@pytest.mark.ray
def test_a_ray_edit_whose_worker_is_killed_loses_and_duplicates_no_pair(
    ray_cluster, pairs, seeds, tiny_img2img, prompt_csv, stores, monkeypatch, tmp_path
):
    from detectors.executors import WorkerSpec
    from generation import editing

    marker = tmp_path / "crashed"
    real_spec = editing.edit_worker_spec

    def crashing_spec(model, settings):
        spec = real_spec(model, settings)
        kwargs = {**spec.kwargs, "crash_marker": str(marker), "crash_on_call": 2}
        return WorkerSpec("tests.generation.tiny_editors.CrashingEditWorker", kwargs, spec.label)

    # An earlier run stored the first prompt's pairs, then stopped.
    edit_from_seeds_study(tiny_img2img, prompt_csv, "--per-pair", "2", "--limit-prompts", "1", *SMALL)
    before = {item.key: image_of(item, "output").sha256 for item in Item.objects.filter(study=pairs)}
    assert len(before) == 4
    stores.clear()
    # Only the Ray run's workers crash (a local run runs the same worker in this process).
    monkeypatch.setattr(editing, "edit_worker_spec", crashing_spec)
    out, err = edit_from_seeds_study(
        tiny_img2img, prompt_csv, "--per-pair", "2", "--batch-size", "1", "--send-images", *SMALL, *RAY
    )
    assert marker.exists()  # a worker really died, on its second batch
    assert "Ray worker 1 died" in err or "Ray worker 2 died" in err
    assert "worker 3 replaces it" in err
    assert "Done: 4 pairs of tiny-sd stored in study pairs (2 seeds x 2 prompts x 2), 4 already there" in out
    items = list(Item.objects.filter(study=pairs))
    assert len(items) == 8
    assert all(item.item_images.count() == 2 for item in items)
    # The missing pairs, each written exactly once; the stored ones untouched.
    assert sorted(stores) == sorted(item.key for item in items if item.key not in before)
    assert {
        key: image_of(Item.objects.get(study=pairs, key=key), "output").sha256 for key in before
    } == before
    workers = [line for line in out.splitlines() if line.startswith("  worker ")]
    assert len(workers) == 3  # two, and the one that replaced the dead one
    assert sum("died with" in line for line in workers) == 1


def test_edit_images_without_ray_names_the_install_command_and_imports_nothing(
    pairs, tiny_img2img, prompt_csv, tmp_path, monkeypatch
):
    from detectors.executors import RAY_INSTALL

    folder = tmp_path / "seeds"
    folder.mkdir()
    PILImage.new("RGB", (40, 40), (200, 10, 10)).save(folder / "f1.png")
    args = ("--study", "pairs", "--seeds", str(folder), "--prompt-set", str(prompt_csv))
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(CommandError, match=RAY_INSTALL.replace(".", r"\.")):
        edit(*args, "--editor", str(tiny_img2img), "--executor", "ray")
    with pytest.raises(CommandError, match="--num-workers, --send-images only apply with --executor ray"):
        edit(*args, "--editor", str(tiny_img2img), "--num-workers", "2", "--send-images")
    assert not Image.objects.exists()  # the seeds folder was not imported
    assert not Item.objects.exists()
