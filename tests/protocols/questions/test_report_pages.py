"""The questions report page and its drill-down, through the test client: the chart's bars
(one per group and answer, with its interval) link to the images of that (question, group,
answer); the numbers on the page are the JSON report's."""

from __future__ import annotations

import re

import pytest
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
