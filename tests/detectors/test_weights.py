from __future__ import annotations

import time
from pathlib import Path

import pytest

from detectors.base import DetectorUnavailable
from detectors.weights import (
    check_tokenizer_covers,
    resolve_weights,
    weights_env_var,
)
from tests.detectors.tiny_models import save_tiny_tokenizer, tiny_tokenizer


def _fake_cached_repo(cache: Path, repo_id: str, files: dict[str, str]) -> None:
    """Lay out a repo in the HF cache the way huggingface_hub writes one."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for name, text in files.items():
        (snapshot / name).write_text(text)


def test_env_var_name_is_upper_case_key_between_biaslab_and_weights():
    assert weights_env_var("clip") == "BIASLAB_CLIP_WEIGHTS"
    assert weights_env_var("face-gender") == "BIASLAB_FACE_GENDER_WEIGHTS"


def test_default_hub_id_not_in_cache_fails_fast_naming_the_variable():
    started = time.monotonic()
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS") as error:
        resolve_weights("clip")
    assert time.monotonic() - started < 2
    assert "openai/clip-vit-large-patch14" in str(error.value)


def test_hub_id_found_in_local_cache_is_returned_as_is(offline_ml_env: Path):
    _fake_cached_repo(offline_ml_env, "openai/clip-vit-large-patch14", {"config.json": "{}"})
    assert resolve_weights("clip") == "openai/clip-vit-large-patch14"


def test_cached_hub_repo_without_a_config_is_refused(offline_ml_env: Path):
    _fake_cached_repo(offline_ml_env, "openai/clip-vit-large-patch14", {"README.md": ""})
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS"):
        resolve_weights("clip")


def test_env_folder_with_a_config_wins_over_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(tmp_path))
    assert resolve_weights("clip") == str(tmp_path.resolve())


def test_env_folder_that_does_not_exist_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(tmp_path / "nowhere"))
    with pytest.raises(DetectorUnavailable, match=r"BIASLAB_CLIP_WEIGHTS.*existing local folder"):
        resolve_weights("clip")


def test_env_folder_without_a_config_is_not_a_saved_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", str(tmp_path))
    with pytest.raises(DetectorUnavailable, match=r"holds no config\.json.*BIASLAB_CLIP_WEIGHTS"):
        resolve_weights("clip")


def test_default_yolo_file_is_not_downloaded_but_refused_with_the_variable():
    with pytest.raises(DetectorUnavailable, match=r"'yolov8n\.pt'.*BIASLAB_YOLO_WEIGHTS"):
        resolve_weights("yolo", config_names=())


def test_local_weights_file_is_returned_as_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    checkpoint = tmp_path / "fairface.pt"
    checkpoint.write_bytes(b"x")
    monkeypatch.setenv("BIASLAB_FAIRFACE_WEIGHTS", str(checkpoint))
    assert resolve_weights("fairface") == str(checkpoint.resolve())


def test_key_without_default_or_variable_says_which_variable_to_set():
    with pytest.raises(DetectorUnavailable, match="set BIASLAB_MIVOLO_WEIGHTS"):
        resolve_weights("mivolo")


def test_offline_placeholder_tokenizer_is_detected_as_not_real():
    from transformers import CLIPTokenizer

    # The trap: offline and uncached, this does not raise but returns a 2-token tokenizer.
    tokenizer = CLIPTokenizer.from_pretrained("openai/clip-vit-large-patch14")
    with pytest.raises(DetectorUnavailable, match="BIASLAB_CLIP_WEIGHTS"):
        check_tokenizer_covers(tokenizer, ["a photo of a male"], var="BIASLAB_CLIP_WEIGHTS")


def test_tokenizer_with_a_tiny_vocabulary_missing_prompt_words_is_refused(tmp_path: Path):
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(save_tiny_tokenizer(tmp_path, "aphotf"))
    check_tokenizer_covers(tokenizer, ["a photo of a photo"], var="BIASLAB_CLIP_WEIGHTS")
    with pytest.raises(DetectorUnavailable, match="cannot spell 'a photo of a male'"):
        check_tokenizer_covers(tokenizer, ["a photo of a male"], var="BIASLAB_CLIP_WEIGHTS")


def test_tokenizer_that_spells_every_prompt_is_accepted(tmp_path: Path):
    tokenizer = tiny_tokenizer(tmp_path)
    check_tokenizer_covers(
        tokenizer, ["a photo of a person with an uncertain gender."], var="BIASLAB_CLIP_WEIGHTS"
    )


def test_configured_weights_keep_hub_ids_and_name_local_folders_by_their_last_part(
    monkeypatch: pytest.MonkeyPatch,
):
    # Shards on two GPU hosts mount the same weights at different paths: the version they store
    # must be the same, or both hosts would predict every image.
    from detectors.weights import configured_weights

    assert configured_weights("clip") == "openai/clip-vit-large-patch14"
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", "/mnt/host-a/models/clip-l14")
    on_host_a = configured_weights("clip")
    monkeypatch.setenv("BIASLAB_CLIP_WEIGHTS", "/scratch/b/clip-l14")
    assert configured_weights("clip") == on_host_a == "clip-l14"


@pytest.mark.parametrize(
    ("value", "label"),
    [
        ("openai/clip-vit-large-patch14", "openai/clip-vit-large-patch14"),
        ("/mnt/gpu-host-3/models/blip2-opt-2.7b", "blip2-opt-2.7b"),
        ("~/models/fairface.pt", "fairface.pt"),
        ("models/res34.pt", "res34.pt"),
        ("", "unconfigured"),
    ],
)
def test_weights_label_keeps_hub_ids_and_only_the_name_of_a_local_path(value: str, label: str):
    from detectors.weights import weights_label

    assert weights_label(value) == label


def test_weights_label_names_an_existing_relative_folder_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from detectors.weights import weights_label

    (tmp_path / "org" / "clip-l14").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert weights_label("org/clip-l14") == "clip-l14"  # looks like a hub id, but it is here


def test_an_explicit_weights_option_beats_the_variable_for_loading_and_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from detectors.weights import configured_value

    given, env = tmp_path / "given.pt", tmp_path / "env.pt"
    given.write_bytes(b"x")
    env.write_bytes(b"x")
    monkeypatch.setenv("BIASLAB_FAIRFACE_WEIGHTS", str(env))
    assert configured_value("fairface", override=str(given)) == str(given)
    assert resolve_weights("fairface", config_names=(), override=str(given)) == str(given.resolve())
    assert resolve_weights("fairface", config_names=()) == str(env.resolve())


def test_a_missing_weights_message_says_what_the_variable_should_point_to():
    with pytest.raises(
        DetectorUnavailable, match=r"set BIASLAB_MIVOLO_WEIGHTS to the checkpoint file m\.pth\.tar\."
    ):
        resolve_weights("mivolo", config_names=(), what="the checkpoint file m.pth.tar")


@pytest.mark.parametrize(
    "key", ["clip", "clip_prob", "clip_uncertain", "blip2", "facepp", "mivolo", "fairface", "clip_enhance"]
)
def test_a_detector_without_weights_fails_in_well_under_5_s_even_with_the_network_allowed(
    key: str, monkeypatch: pytest.MonkeyPatch
):
    from detectors import registry

    # Without HF_HUB_OFFLINE a hub download would retry for ~40 s: only the local cache is read.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    options = {"face_method": "hog"} if key in ("clip_prob", "clip_enhance") else {}
    started = time.perf_counter()
    with pytest.raises(DetectorUnavailable, match=r"BIASLAB_\w+"):
        registry.get(key, **options).ensure_loaded()
    assert time.perf_counter() - started < 5
