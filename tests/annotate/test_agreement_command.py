"""``manage.py agreement``: JSON with at least cohen_kappa, observed_agreement and n_images."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from sklearn.metrics import cohen_kappa_score

from tests.factories import ImageFactory, LabelFactory, PromptFactory

PAIRS = [
    ("male", "male", "sdxl", "profession"),
    ("female", "female", "sdxl", "profession"),
    ("male", "female", "sd3", "profession"),
    ("low_quality", "low_quality", "sd3", "place"),
    ("other", "low_quality", "sd3", "place"),
]


@pytest.fixture
def labelled(study, annotator_a, annotator_b):
    prompts = {c: PromptFactory(study=study, category=c) for c in ("profession", "place")}
    for a, b, model, category in PAIRS:
        image = ImageFactory(prompt=prompts[category], t2i_model=model)
        LabelFactory(image=image, annotator=annotator_a, value=a)
        LabelFactory(image=image, annotator=annotator_b, value=b)
    # One image with a single label does not count.
    LabelFactory(image=ImageFactory(prompt=prompts["place"]), annotator=annotator_a, value="male")
    return study


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("agreement", *args, stdout=out)
    return out.getvalue()


def test_json_prints_kappa_agreement_and_count_equal_to_scikit_learn(labelled):
    report = json.loads(run("--format", "json"))
    assert isinstance(report["cohen_kappa"], float)
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    )
    assert report["observed_agreement"] == pytest.approx(3 / 5)
    assert report["n_images"] == 5
    for key in ("labels", "confusion", "per_t2i_model", "per_category", "per_annotator_pair"):
        assert key in report
    assert report["per_annotator_pair"][0]["annotators"] == ["anna", "ben"]


def test_json_filters_by_study_model_and_category(labelled):
    report = json.loads(run("--study", "gender", "--t2i-model", "sd3", "--category", "place"))
    assert report["n_images"] == 2
    assert report["observed_agreement"] == 0.5
    assert report["cohen_kappa"] == pytest.approx(
        cohen_kappa_score(["low_quality", "other"], ["low_quality", "low_quality"])
    )


def test_text_format_reads_as_a_summary(labelled):
    text = run("--format", "text")
    assert "Images with two or more labels: 5" in text
    assert "Observed agreement: 0.600" in text
    assert "anna & ben" in text


def test_an_unknown_study_is_refused_with_the_known_ones(labelled):
    with pytest.raises(CommandError, match="No study with slug 'nope' \\(existing studies: gender\\)"):
        run("--study", "nope")


def test_an_unknown_model_or_category_is_refused_with_the_known_ones(labelled):
    with pytest.raises(CommandError, match="No images of T2I model 'dalle' \\(T2I models: sd3, sdxl\\)"):
        run("--t2i-model", "dalle")
    with pytest.raises(
        CommandError, match="No images of prompt category 'food' \\(categories: place, profession\\)"
    ):
        run("--category", "food")


def test_no_labels_gives_null_kappa_not_zero(study):
    report = json.loads(run("--study", "gender"))
    assert report["n_images"] == 0
    assert report["cohen_kappa"] is None
    assert report["observed_agreement"] is None
