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
    # Each annotator's answer, by name (the drill-down is the researchers').
    assert 'labels: <span class="who">rater0</span>: old, <span class="who">rater1</span>: old</p>' in text
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


def test_the_drill_down_counts_every_image_and_reads_only_the_shown_ones(
    client_for, researcher, tmp_path, monkeypatch
):
    from protocols.questions import views

    build_report_study(tmp_path)
    monkeypatch.setattr(views, "LIMIT", 2)
    url = reverse("reports:question_answer") + "?study=qs&question=age&group=dark&answer=old"
    text = client_for(researcher).get(url).content.decode()
    assert "3 images with the final answer Old. The first 2 are shown." in text
    assert re.findall(r'data-item="(img\d\.png)"', text) == ["img4.png", "img5.png"]


def test_the_drill_down_matches_a_group_of_more_items_than_one_statement_may_name(settings, tmp_path):
    """The group's items are matched in chunks: with SQLite's own limit at 4 bound values, one
    statement naming the group's three items (and the question and answer) is refused."""
    from protocols.questions import selectors as qsel
    from reports.selectors import Scope
    from studies.models import Study
    from tests.sqlite_limits import sqlite_variable_limit

    build_report_study(tmp_path)
    settings.BIASLAB_SQL_MAX_VARIABLES = 12  # two values per chunk
    scope = Scope(Study.objects.get(slug="qs"))
    with sqlite_variable_limit(4):
        rows, n = qsel.answer_items(scope, question_key="age", group="dark", answer="old", limit=10)
        few, same_n = qsel.answer_items(scope, question_key="age", group="dark", answer="old", limit=1)
    assert n == same_n == 3
    assert [r.item.key for r in rows] == ["img4.png", "img5.png", "img6.png"]
    assert [r.item.key for r in few] == ["img4.png"]
    assert all(r.labels for r in rows)
