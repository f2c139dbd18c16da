"""The dashboard's category filter narrows every table, chart and number of the gender report,
and every download link of the page keeps it.

Numbers by hand from ``tests.reports.dashboard_data``: the category "place" is the prompt
"R&D_lab 100%", items 7-10 — sdxl: low quality, low quality (fake: filtered, filtered); sd3:
male, female (fake: male, male). Detector "facey" predicted only "profession" items.
"""

from __future__ import annotations

import csv
import html as htmllib
import io
import re

import pytest
from django.urls import reverse

from protocols.gender import tables as gtables

pytestmark = pytest.mark.django_db

PLACE = {"category": "place"}


def _rows(client, key: str, **params: str) -> dict[str, dict[str, str]]:
    response = client.get(reverse("reports:table", args=[key, "csv"]), params)
    assert response.status_code == 200, response.content
    return {row[next(iter(row))]: row for row in csv.DictReader(io.StringIO(response.content.decode()))}


@pytest.mark.parametrize("key", [*gtables.OVERVIEW_KEYS, "prompt_scores"])
def test_every_overview_table_changes_with_the_category_filter(fx, rita, key):
    assert _rows(rita, key) != _rows(rita, key, **PLACE), key


def test_model_bias_table_of_a_category_counts_only_its_images(fx, rita):
    rows = _rows(rita, "model_bias", **PLACE)
    human = rows["Human (ground truth)"]
    assert (human["sd3_score"], human["sd3_n_images"]) == ("0.0", "2")  # |1 - 1| / 2
    assert (human["sdxl_score"], human["sdxl_n_images"]) == ("", "2")  # no clear image
    assert rows["fake"]["sd3_score"] == "1.0"  # male, male


def test_filtering_table_of_a_category_counts_only_its_images(fx, rita):
    fake = _rows(rita, "filtering", **PLACE)["fake"]
    assert (fake["tp"], fake["fp"], fake["fn"], fake["tn"]) == ("2", "0", "0", "2")
    assert fake["version"] == "2"  # the run reported is still the study's latest
    assert _rows(rita, "filtering", **PLACE)["facey"]["tp"] == "0"  # facey saw no "place" image


def test_prompt_difference_and_label_shares_of_a_category(fx, rita):
    assert _rows(rita, "prompt_difference", **PLACE)["fake"]["n_images"] == "4"
    shares = _rows(rita, "label_shares", **PLACE)["Total"]
    assert (shares["male"], shares["female"], shares["low_quality"], shares["n_images"]) == (
        "0.25",
        "0.25",
        "0.5",
        "4",
    )


@pytest.mark.parametrize(
    ("name", "extra"), [("model_bias", {}), ("heatmap", {}), ("histogram", {"source": "fake"})]
)
def test_every_chart_changes_with_the_category_filter(fx, rita, name, extra):
    url = reverse("reports:chart", args=[name, "svg"])
    everything = rita.get(url, extra).content
    place = rita.get(url, extra | PLACE).content
    assert everything != place, name


def test_overview_coverage_and_agreement_follow_the_category(fx, rita):
    html = rita.get(reverse("reports:overview"), PLACE).content.decode()
    coverage = re.sub(r"\s+", " ", html.split('id="coverage"')[1].split("</p>")[0])
    assert "4 of 4 images" in coverage
    assert "on 4 doubly labelled images" in coverage
    assert "every number, table and chart on this page" in coverage
    everything = rita.get(reverse("reports:overview")).content.decode()
    assert "10 of 11 images" in everything


def test_every_download_and_chart_link_of_the_overview_keeps_the_category(fx, rita):
    html = htmllib.unescape(rita.get(reverse("reports:overview"), PLACE).content.decode())
    links = re.findall(r'(?:href|src)="(/reports/(?:table|chart)[^"]*)"', html)
    assert len(links) >= 3 * len(gtables.OVERVIEW_KEYS) + 3  # tables x 3 formats, chart img + 2
    assert all("category=place" in link for link in links), [x for x in links if "category=place" not in x]
