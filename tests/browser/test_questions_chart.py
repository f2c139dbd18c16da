"""The questions report's answer-shares charts are readable on a laptop and on a phone: every
label drawn at 11 px or more at 1280 and at 375 px wide, a title per T2I model, and on a wide
screen the chart fills its card."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.protocols.questions.data import build_judge_study

pytestmark = pytest.mark.browser

SIZES = """() => [...document.querySelectorAll('figure.shares-chart')].map((figure) => {
  const svg = figure.querySelector('svg.shares');
  const texts = [...svg.querySelectorAll('text')].map((t) => t.getBoundingClientRect().height);
  return {
    title: svg.querySelector('.chart-title').textContent,
    smallest: Math.min(...[...svg.querySelectorAll('text')].map(
      (t) => parseFloat(t.getAttribute('font-size')) * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width)),
    svg: svg.getBoundingClientRect().width,
    card: figure.getBoundingClientRect().width,
    page: document.documentElement.scrollWidth,
    n: texts.length,
  };
})"""


@pytest.mark.parametrize("width", [1280, 375])
def test_the_shares_charts_labels_are_at_least_11_px(page, login, live_server, researcher, tmp_path, width):
    build_judge_study(tmp_path)
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(60_000)  # a loaded machine serves the first page slowly
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}{reverse('reports:overview')}?study=qj")
    charts = page.evaluate(SIZES)
    assert sorted(chart["title"] for chart in charts) == ["dalle", "sdxl"]
    for chart in charts:
        assert chart["smallest"] >= 11, chart
        assert chart["svg"] >= 0.9 * chart["card"] - 30, chart  # the chart fills its card
        assert chart["page"] <= width, chart  # no sideways scrolling
