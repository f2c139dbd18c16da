"""On the report pages a chart is never shrunk below the size it was drawn at while the page has
room for it (the pair report's word-score figure, three panels wide, was scaled to
46rem and its 8 pt text showed at about 6 px). Each chart's 8 pt text is at least 8 pt on a
1280 px wide screen: the image is shown at 100 % or more of its own width."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.reports import pair_change_data
from tests.reports.test_objects_report import build as objects_build

pytestmark = pytest.mark.browser

SCALES = """() => [...document.querySelectorAll('figure.chart img')].map((img) => ({
  src: img.getAttribute('src'), natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
}))"""


@pytest.mark.parametrize("study", ["bp", "cooccur"])
def test_report_charts_are_shown_at_their_own_size_or_larger_on_a_laptop(
    page, login, live_server, researcher, study
):
    pair_change_data.build(slug="bp")
    objects_build()
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}{reverse('reports:overview')}?study={study}")
    images = page.locator("figure.chart img")
    assert images.count() > 0
    for index in range(images.count()):  # lazy images load once scrolled to
        image = images.nth(index)
        image.scroll_into_view_if_needed()
        page.wait_for_function(
            "(el) => el.complete && el.naturalWidth > 0", arg=image.element_handle(), timeout=30_000
        )
    charts = page.evaluate(SCALES)
    assert charts
    for chart in charts:
        assert chart["shown"] >= chart["natural"] - 1, chart
