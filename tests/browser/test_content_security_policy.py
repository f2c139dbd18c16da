"""Under the strict Content-Security-Policy the screens work and the browser refuses nothing:
the labeling keys swap images, the dashboard's htmx filters and heatmap colours work, the admin
and the error pages render — with no 'Refused to …' in Chromium's console."""

from __future__ import annotations

import pytest

from tests.factories import ItemFactory, PromptFactory
from tests.reports import dashboard_data

pytestmark = pytest.mark.browser


def _watch(page) -> list[str]:
    """Console messages in which Chromium reports a Content-Security-Policy violation."""
    refused: list[str] = []
    page.on(
        "console",
        lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None,
    )
    return refused


def test_the_annotator_screens_run_under_the_policy(page, login, live_server, study, annotator_a):
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt) for _ in range(2)]
    refused = _watch(page)
    page.goto(f"{live_server.url}/accounts/login/")
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    page.locator(f"#current-image[data-item-id='{items[0].pk}']").wait_for()
    page.keyboard.press("m")  # htmx: POST, swap, show the next item
    page.locator(f"#current-image[data-item-id='{items[1].pk}']").wait_for()
    page.goto(f"{live_server.url}/reports/")  # a 403 in the layout
    assert refused == []


def test_the_researcher_and_admin_screens_run_under_the_policy(
    page, login, live_server, study, annotator_a, annotator_b, admin_user
):
    dashboard_data.build(study, annotator_a, annotator_b)
    refused = _watch(page)
    login(page, live_server, admin_user)
    for path in ("/reports/", "/annotate/agreement/", "/annotate/disputes/", "/detectors/runs/", "/admin/"):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/reports/heatmap/")
    cell = page.locator("table.heat td[data-colour]").first
    colour = cell.get_attribute("data-colour")
    painted = cell.evaluate("td => getComputedStyle(td).backgroundColor")
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    assert painted == f"rgb({red}, {green}, {blue})"  # reports.js painted it through the CSSOM
    page.goto(f"{live_server.url}/no-such-page/")
    assert refused == []
