"""The questions report page and its drill-down, through the test client: the chart's bars
(one per group and answer, with its interval) link to the images of that (question, group,
answer); the numbers on the page are the JSON report's."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.protocols.questions.data import build_report_study

pytestmark = pytest.mark.django_db


def test_the_overview_draws_a_bar_with_its_interval_per_group_and_answer(client_for, researcher, tmp_path):
    build_report_study(tmp_path)
    response = client_for(researcher).get(reverse("reports:overview") + "?study=qs")
    assert response.status_code == 200
    html = response.content.decode()
    bars = re.findall(
        r'class="share-bar"[^>]*data-group="(\w+)" data-answer="(\w+)" data-share="([\d.]+)"', html
    )
    assert ("light", "young", "0.75") in bars
    assert ("dark", "old", "0.75") in bars
    assert len([b for b in bars if b[0] == "light"]) == 3  # every answer, given or not
    assert 'class="ci"' in html
    assert "Cramér&#x27;s V" in html or "Cramér's V" in html
    assert "llava" in html


def test_a_bar_leads_to_the_images_of_its_group_and_answer(client_for, researcher, tmp_path):
    build_report_study(tmp_path)
    client = client_for(researcher)
    html = client.get(reverse("reports:overview") + "?study=qs").content.decode()
    link = re.search(r'href="([^"]*group=dark&amp;answer=old)"', html).group(1).replace("&amp;", "&")
    page = client.get(link)
    assert page.status_code == 200
    text = page.content.decode()
    assert "3 images with the final answer Old" in text
    assert {"img4.png", "img5.png", "img6.png"} == set(re.findall(r'data-item="(img\d\.png)"', text))


def test_the_drill_down_refuses_an_unknown_answer_and_other_roles(
    client_for, researcher, annotator_a, tmp_path
):
    build_report_study(tmp_path)
    url = reverse("reports:question_answer")
    assert (
        client_for(researcher).get(url + "?study=qs&question=age&group=dark&answer=ancient").status_code
        == 404
    )
    assert (
        client_for(researcher).get(url + "?study=qs&question=height&group=dark&answer=old").status_code == 404
    )
    assert (
        client_for(annotator_a).get(url + "?study=qs&question=age&group=dark&answer=old").status_code == 403
    )


def test_a_study_without_final_answers_has_a_page_and_an_empty_report(
    client_for, researcher, questions_study
):
    response = client_for(researcher).get(reverse("reports:overview") + "?study=qs")
    assert response.status_code == 200
    assert "No final answer to this question yet." in response.content.decode()
    out = io.StringIO()
    call_command("bias_report", "--study", "qs", stdout=out)
    report = json.loads(out.getvalue())
    assert report["questions"] == {"age": {}, "wealth": {}}
    assert report["agreement"]["age"] == {
        "krippendorff_alpha": None,
        "fleiss_kappa": None,
        "observed_agreement": None,
        "n_items": 0,
    }
    assert report["detectors"] == {}


def test_the_report_honours_the_t2i_model_and_detector_filters(tmp_path):
    build_report_study(tmp_path)
    out = io.StringIO()
    call_command("bias_report", "--study", "qs", "--t2i-model", "sdxl", "--detector", "llava", stdout=out)
    report = json.loads(out.getvalue())
    assert list(report["questions"]["age"]) == ["sdxl"]
    assert report["detectors"]["llava"]["age"]["n"] == 8
    assert report["detectors"]["llava"]["age"]["accuracy"] == 3 / 8
    with pytest.raises(CommandError):
        call_command("bias_report", "--study", "qs", "--detector", "nobody", stdout=io.StringIO())
