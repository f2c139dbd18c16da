"""A VLM judge on a gender study is an ordinary gender detector (its verdicts count in the
report's detector tables) and, beside, every version is measured image by image against the
final answers on the images people found clear: a "can't tell" is set aside and counted, its
probabilities give Brier and ECE; two versions are compared."""

from __future__ import annotations

import pytest
from sklearn.metrics import brier_score_loss, cohen_kappa_score

from detectors.models import Prediction
from reports.analyses import analysis_of
from reports.selectors import Scope
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory, image_of

pytestmark = pytest.mark.django_db

#: Per image: final label, then vlm_judge@a's P(male), P(female), P(can't tell) (None: failed).
ROWS = [
    ("male", (0.8, 0.1, 0.1)),
    ("male", (0.3, 0.6, 0.1)),
    ("female", (0.2, 0.7, 0.1)),
    ("female", (0.1, 0.2, 0.7)),  # can't tell: set aside
    ("low_quality", (0.5, 0.4, 0.1)),  # people found it unclear: not compared
    ("male", None),  # failed
]


def _output(p):
    male, female, cant_tell = p
    scores = {"male": male, "female": female, "cant_tell": cant_tell}
    best = max(scores, key=scores.__getitem__)
    if best == "cant_tell":
        return {"label": "filtered", "reason": "uncertain", "scores": scores}
    return {"label": best, "reason": "", "scores": scores}


@pytest.fixture
def report(study):
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    for final, p in ROWS:
        item = ItemFactory(prompt=prompt, t2i_model="sdxl")
        FinalLabelFactory(item=item, value=final)
        image = image_of(item)
        if p is None:
            Prediction.objects.create(
                image=image, detector="vlm_judge", version="a", kind="gender", status="failed", error="x"
            )
        else:
            Prediction.objects.create(
                image=image, detector="vlm_judge", version="a", kind="gender", output=_output(p)
            )
        Prediction.objects.create(
            image=image,
            detector="vlm_judge",
            version="b",
            kind="gender",
            output={"label": "male", "reason": "", "scores": {}},
        )
    return analysis_of(study).build(Scope(study), bootstrap=0)


def test_the_judge_is_an_ordinary_gender_detector_of_the_report(report):
    assert report["detectors"]["vlm_judge"]["version"] == "b"  # the latest run, as for any detector


def test_each_version_is_measured_image_by_image_on_the_images_people_found_clear(report):
    a = report["judges"]["vlm_judge@a"]["gender"]
    truth, said, p_male = ["male", "male", "female"], ["male", "female", "female"], [0.8, 0.3, 0.2]
    assert a["n"] == 3
    assert a["accuracy"] == pytest.approx(2 / 3)
    assert a["cohen_kappa"] == pytest.approx(cohen_kappa_score(truth, said))
    assert a["confusion"] == {"male": {"male": 1, "female": 1}, "female": {"male": 0, "female": 1}}
    assert a["excluded"] == {"failed": 1, "filtered": 1, "unanswered": 0}
    # P(male) given clear: .8/.9, .3/.9, .2/.9
    p = [m / 0.9 for m in p_male]
    assert a["brier"] == pytest.approx(brier_score_loss([t == "male" for t in truth], p))
    assert a["n_probabilities"] == 3
    b = report["judges"]["vlm_judge@b"]["gender"]
    assert (b["n"], b["brier"]) == (5, None)  # no probabilities
    pair = report["judge_versions"]["vlm_judge@a vs vlm_judge@b"]["gender"]
    assert pair["n"] == 4  # both answered male / female
    assert pair["agreement"] == pytest.approx(2 / 4)


def test_the_page_shows_the_judges_and_their_tables_download(report, client_for, researcher):
    from django.urls import reverse

    client = client_for(researcher)
    html = client.get(reverse("reports:overview") + "?study=gender").content.decode()
    assert 'id="table-judges"' in html
    assert 'id="table-judge_versions"' in html
    response = client.get(reverse("reports:table", args=["judges", "csv"]) + "?study=gender")
    assert response.status_code == 200
    assert "vlm_judge@a,gender,3," in response.content.decode()
