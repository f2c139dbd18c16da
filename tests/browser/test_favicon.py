"""BiasLab has a favicon: a small SVG (and a PNG for browsers without SVG icons) in
static/, linked from the base template, which Chromium loads under the strict
Content-Security-Policy — instead of asking for /favicon.ico and getting a 404."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.templatetags.static import static

STATIC = Path(settings.BASE_DIR) / "static"


@pytest.mark.django_db
def test_every_page_links_the_icons_in_static(client):
    html = client.get("/accounts/login/").content.decode()
    for name, kind in (("favicon.svg", "image/svg+xml"), ("favicon.png", "image/png")):
        assert f'<link rel="icon" href="{static(name)}" type="{kind}"' in html
        size = (STATIC / name).stat().st_size
        assert 0 < size < 4096, f"{name} is {size} bytes"
    svg = (STATIC / "favicon.svg").read_text()
    assert "<script" not in svg
    assert "style=" not in svg  # the policy refuses inline styles


@pytest.mark.browser
def test_chromium_loads_the_favicon_under_the_policy(page, live_server):
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    with page.expect_response(lambda response: "favicon" in response.url, timeout=15_000) as icon:
        page.goto(f"{live_server.url}/accounts/login/")
    assert icon.value.url.endswith(static("favicon.svg")), icon.value.url
    assert icon.value.status == 200
    assert icon.value.headers["content-type"].startswith("image/svg+xml")
    page.wait_for_load_state("networkidle")
    assert refused == []
