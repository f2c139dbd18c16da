"""The questions report in Chromium (issue 20 §1): the answer-shares chart draws a bar per
(group, answer) with its 95 % interval whisker, and clicking a bar opens its images."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.protocols.questions.data import build_report_study

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BARS = """() => [...document.querySelectorAll('a.share-bar')].map((a) => {
  const rect = a.querySelector('rect').getBoundingClientRect();
  const ci = a.querySelector('line.ci').getBoundingClientRect();
  return {group: a.dataset.group, answer: a.dataset.answer, share: +a.dataset.share,
          width: rect.width, ciLeft: ci.left, ciRight: ci.right, barRight: rect.right};
})"""


def test_the_chart_shows_shares_with_intervals_and_a_bar_opens_its_images(
    page, login, live_server, researcher, tmp_path
):
    build_report_study(tmp_path)
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}{reverse('reports:overview')}?study=qs")
    bars = page.evaluate(BARS)
    assert len(bars) == 6  # two groups x three answers of "age" (wealth has no final answer)
    young = next(b for b in bars if b["group"] == "light" and b["answer"] == "young")
    middle = next(b for b in bars if b["group"] == "light" and b["answer"] == "middle")
    assert young["share"] == 0.75
    assert young["width"] > 100
    assert middle["width"] == 0
    # The whisker spans the bar's end: the Wilson interval contains the share.
    assert young["ciLeft"] < young["barRight"] < young["ciRight"]
    page.locator('a.share-bar[data-group="dark"][data-answer="old"]').click()
    page.wait_for_url("**/reports/questions/answer/**")
    assert page.locator("li.answer-image").count() == 3
    assert page.locator("li.answer-image img").first.evaluate("(img) => img.complete && img.naturalWidth > 0")
