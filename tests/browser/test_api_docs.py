"""Swagger UI and Redoc render the API's operations in Chromium under the site's default
Content-Security-Policy (both were blank unless BIASLAB_CSP=off). Their pages get a
policy of their own that lets them run, with every script and stylesheet from this server (the
installed drf-spectacular-sidecar package), nothing from another origin."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from config import csp

pytestmark = pytest.mark.browser

REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def _watch(page, live_server) -> tuple[list[str], dict[str, str]]:
    """(console messages reporting a CSP violation, requests the page sent to another origin).
    A request the policy refused never leaves the browser, so it is not counted: Chromium
    reports it as a request that failed with 'csp'."""
    refused: list[str] = []
    foreign: dict[str, str] = {}
    own = urlparse(live_server.url).netloc
    page.on(
        "console",
        lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None,
    )

    def sent(request) -> None:
        url = urlparse(request.url)
        if url.scheme in ("http", "https") and url.netloc != own:
            foreign[request.url] = "sent"

    def failed(request) -> None:
        if request.url in foreign and request.failure == "csp":
            del foreign[request.url]

    page.on("request", sent)
    page.on("requestfailed", failed)
    return refused, foreign


def test_swagger_ui_renders_the_operations_under_the_default_policy(
    page, login, live_server, researcher, settings
):
    settings.BIASLAB_CSP = csp.DEFAULT_POLICY
    refused, foreign = _watch(page, live_server)
    login(page, live_server, researcher)
    response = page.goto(f"{live_server.url}/api/schema/swagger/")
    assert response.headers["content-security-policy"] == csp.API_DOCS_POLICY
    page.locator(".opblock-summary-path", has_text="/api/studies/").first.wait_for()
    assert page.locator(".opblock").count() > 10
    page.locator(".opblock-summary", has_text="/api/token/").first.click()  # opens: React runs
    page.locator(".opblock-body").first.wait_for()
    assert refused == []
    assert foreign == {}


def test_redoc_renders_the_operations_under_the_default_policy(
    page, login, live_server, researcher, settings
):
    settings.BIASLAB_CSP = csp.DEFAULT_POLICY
    refused, foreign = _watch(page, live_server)
    login(page, live_server, researcher)
    response = page.goto(f"{live_server.url}/api/schema/redoc/")
    assert response.headers["content-security-policy"] == csp.API_DOCS_POLICY
    page.get_by_role("heading", name="BiasLab API").first.wait_for()
    page.locator("[data-section-id^='tag/']").first.wait_for()
    assert page.locator("[data-section-id^='operation/']").count() > 10
    # Redoc's "API docs by Redocly" footer always asks cdn.redoc.ly for its logo: the policy
    # refuses it (the app runs offline and sends no request elsewhere), the link stays.
    assert [text for text in refused if REDOC_LOGO not in text] == []
    assert foreign == {}
