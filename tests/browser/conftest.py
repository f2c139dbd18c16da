"""Playwright (sync API) on Debian's Chromium, for the few flows people do with the keyboard.

Fixtures for every browser test: ``browser`` (one Chromium per session), ``page`` (a fresh
context per test: its own cookies), and ``login(page, live_server, user)``. Tests need the
``browser`` marker; without /usr/bin/chromium or the playwright package they are skipped.
Never ``playwright install``: it downloads a browser, which this project does not use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.factories import PASSWORD

# Playwright's sync API runs an asyncio loop in the test thread, and Django refuses ORM calls
# from a thread with a running loop. The test thread only sets up rows and reads results.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is not installed (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _missing()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.skip(reason=reason))


def launch_chromium(playwright: Any) -> Any:
    """Debian's Chromium with the flags that keep it offline and quiet."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    tab = context.new_page()
    yield tab
    context.close()


def _login(page: Any, live_server: Any, user: Any) -> None:
    """Log ``user`` in through the login form (keyboard: type, Enter) and wait for home."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "/accounts/login/" not in page.url, f"login failed for {user.username}"


@pytest.fixture
def login() -> Callable[[Any, Any, Any], None]:
    """login(page, live_server, user): log the user in on that page."""
    return _login
