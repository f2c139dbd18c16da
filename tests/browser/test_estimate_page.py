"""The estimate page at 1280 px: its summary table fits without scrolling sideways."""

from __future__ import annotations

import pytest

from estimates.services import sampling_round_create
from tests.estimates.conftest import (  # noqa: F401  (the fixtures, for this module)
    sampled_study,
    worker_in_process,  # autouse: the estimate worker runs in this process, on the test database
)

pytestmark = [pytest.mark.browser, pytest.mark.live_server]

WIDTHS = """() => {
  const table = document.querySelector('table.estimate-summary');
  const frame = table.closest('.scroll');
  return {table: table.scrollWidth, frame: frame.clientWidth,
          page: document.documentElement.scrollWidth, window: window.innerWidth};
}"""


@pytest.mark.django_db(transaction=True)
def test_the_estimate_table_fits_1280_pixels(sampled_study, researcher, live_server, page, login):  # noqa: F811
    sampled_study.finish(sampling_round_create(study=sampled_study.study, detector="fake", budget=12, seed=3))
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}/reports/estimate/?study=gender")
    assert page.viewport_size["width"] == 1280
    widths = page.evaluate(WIDTHS)
    assert widths["table"] <= widths["frame"], widths
    assert widths["page"] <= widths["window"], widths
    assert page.get_by_role("columnheader", name="Effective labels").is_visible()
