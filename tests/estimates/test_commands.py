"""The commands' contracts: sample_for_labeling, export_sampling (CSV columns), estimate_bias (JSON keys)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from estimates.models import SamplingRound

pytestmark = pytest.mark.django_db

MODEL_KEYS = {
    "model_bias_score",
    "human_only",
    "detector_only",
    "lambda",
    "effective_labels",
    "n_images",
    "n_labelled",
    "rounds",
    "prompts",
    "labels_for_half_width",
}
EXTRA_KEYS = {"warnings", "pending"}


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_sample_for_labeling_creates_a_round(sampled_study):
    text = _run(
        "sample_for_labeling", "--study", "gender", "--detector", "fake", "--budget", "6", "--seed", "4"
    )
    sampling_round = SamplingRound.objects.get()
    assert (sampling_round.budget, sampling_round.seed, sampling_round.design) == (6, 4, "uniform")
    assert f"selected {sampling_round.n_selected} image(s)" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--budget", "0"), "--budget: must be a whole number"),
        (("--budget", "999"), "--budget: 999 is more than the 48"),
        (("--budget", "3", "--design", "active"), "--design: active needs"),
    ],
)
def test_sample_for_labeling_names_the_bad_flag(sampled_study, args, message):
    with pytest.raises(CommandError, match=message):
        _run("sample_for_labeling", "--study", "gender", "--detector", "fake", *args)


def test_sample_for_labeling_names_an_unknown_study_or_detector(sampled_study):
    with pytest.raises(CommandError, match=r"No study with slug 'nope' \(existing studies: gender\)"):
        _run("sample_for_labeling", "--study", "nope", "--detector", "fake", "--budget", "3")
    with pytest.raises(CommandError, match="--detector: 'clip' has no gender predictions"):
        _run("sample_for_labeling", "--study", "gender", "--detector", "clip", "--budget", "3")


def test_export_sampling_writes_exactly_the_contract_columns(sampled_study):
    sampling_round = _run(
        "sample_for_labeling", "--study", "gender", "--detector", "fake", "--budget", "6", "--seed", "1"
    )
    assert sampling_round
    first = SamplingRound.objects.get()
    sampled_study.finish(first)
    rows = list(csv.reader(io.StringIO(_run("export_sampling", "--study", "gender", "--format", "csv"))))
    assert rows[0] == ["image", "round", "pi", "selected", "labelled"]
    assert len(rows) == 1 + 48
    by_image = {row[0]: row for row in rows[1:]}
    selected = first.round_items.filter(selected=True).select_related("item").first()
    assert by_image[selected.item.key] == [selected.item.key, "1", repr(6 / 48), "1", "1"]
    unselected = first.round_items.filter(selected=False).select_related("item").first()
    assert by_image[unselected.item.key][3:] == ["0", "0"]


def test_export_sampling_json_holds_the_csv_rows_as_objects(sampled_study, tmp_path):
    _run("sample_for_labeling", "--study", "gender", "--detector", "fake", "--budget", "6", "--seed", "1")
    sampled_study.finish(SamplingRound.objects.get())
    rows = list(csv.DictReader(io.StringIO(_run("export_sampling", "--study", "gender"))))
    data = json.loads(_run("export_sampling", "--study", "gender", "--format", "json"))
    assert len(data) == len(rows) == 48
    assert all(list(entry) == ["image", "round", "pi", "selected", "labelled"] for entry in data)
    assert data[0] == {
        "image": rows[0]["image"],
        "round": 1,
        "pi": 6 / 48,
        "selected": int(rows[0]["selected"]),
        "labelled": int(rows[0]["labelled"]),
    }
    target = tmp_path / "sampling.json"
    assert _run("export_sampling", "--format", "json", "--output", str(target)) == ""  # the only study
    assert json.loads(target.read_text(encoding="utf-8")) == data


def test_estimate_bias_json_has_exactly_the_contract_keys(sampled_study):
    _run("sample_for_labeling", "--study", "gender", "--detector", "fake", "--budget", "20", "--seed", "2")
    sampled_study.finish(SamplingRound.objects.get())
    data = json.loads(
        _run(
            "estimate_bias",
            "--study",
            "gender",
            "--detector",
            "fake",
            "--format",
            "json",
            "--bootstrap",
            "50",
        )
    )
    assert set(data) == {"sdxl", "sd3"}
    for body in data.values():
        assert set(body) == MODEL_KEYS | EXTRA_KEYS
        assert set(body["model_bias_score"]) >= {"estimate", "ci95"}
        assert set(body["human_only"]) >= {"estimate", "ci95"}
        assert body["n_images"] == 24
        assert body["rounds"] == 1
        assert body["pending"] == []
        assert set(body["prompts"]) == {"a photo of a doctor", "a photo of a nurse", "a photo of a teacher"}
        for prompt in body["prompts"].values():
            assert set(prompt) == {"estimate", "ci95", "n_images", "n_labelled"}
            assert prompt["n_images"] == 8
        low, high = body["model_bias_score"]["ci95"]
        assert 0 <= low <= high <= 1
    assert sum(body["n_labelled"] for body in data.values()) == SamplingRound.objects.get().n_selected


def test_estimate_bias_before_any_round_gives_nulls_and_the_detector_score(sampled_study):
    data = json.loads(_run("estimate_bias", "--study", "gender", "--detector", "fake"))
    body = data["sdxl"]
    assert set(body) == MODEL_KEYS | EXTRA_KEYS
    assert body["model_bias_score"] == {"estimate": None, "ci95": None, "bias_corrected": None}
    assert body["human_only"] == {"estimate": None, "ci95": None, "bias_corrected": None}
    assert body["labels_for_half_width"] is None
    assert body["rounds"] == 0
    assert body["n_labelled"] == 0
    assert body["detector_only"] is not None
    assert body["prompts"]["a photo of a doctor"] == {
        "estimate": None,
        "ci95": None,
        "n_images": 8,
        "n_labelled": 0,
    }


def test_estimate_bias_markdown_and_csv(sampled_study):
    md = _run("estimate_bias", "--study", "gender", "--detector", "fake", "--format", "md")
    assert "| T2I model |" in md
    assert "sdxl" in md
    rows = list(
        csv.reader(
            io.StringIO(_run("estimate_bias", "--study", "gender", "--detector", "fake", "--format", "csv"))
        )
    )
    assert rows[0][:4] == ["t2i_model", "estimate", "ci95_lo", "ci95_hi"]


def test_estimate_bias_names_a_detector_without_predictions(sampled_study):
    with pytest.raises(CommandError, match="--detector: detector 'clip' has no gender predictions"):
        _run("estimate_bias", "--study", "gender", "--detector", "clip")
