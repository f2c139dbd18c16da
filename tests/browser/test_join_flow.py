"""A panel participant through a join link, by keyboard: the link with PROLIFIC_PID, the
guidelines with their examples and the consent line, labels up to the quota, the completion code;
the link opened again continues; a second id gets its own account; a closed or expired link
refuses with a page that says so."""

from __future__ import annotations

import pytest
from django.utils import timezone

from annotate.models import Label
from crowd.models import JoinLink, Participant
from crowd.services import guideline_examples_set, join_link_close, join_link_create
from tests.browser.screenshots import screenshots_dir
from tests.factories import ItemFactory, PromptFactory

pytestmark = pytest.mark.browser


def _shown_id(page) -> int:
    return int(page.locator("#current-image").get_attribute("data-item-id"))


def _press_and_wait(page, key: str, shown: int) -> None:
    """Press ``key`` on item ``shown`` and wait until another item (or another page) replaces it."""
    page.keyboard.press(key)
    page.wait_for_function(
        "id => !document.getElementById('current-image') || "
        "document.getElementById('current-image').dataset.itemId !== String(id)",
        arg=shown,
    )


def test_a_participant_joins_labels_to_the_quota_and_gets_the_completion_code(
    page, browser, live_server, study
):
    prompt = PromptFactory(study=study, category="profession", word="pilot")
    items = [ItemFactory(prompt=prompt) for _ in range(4)]
    guideline_examples_set(study=study, examples=[("", "male", items[0].key), ("", "female", items[1].key)])
    link, token = join_link_create(
        study=study, quota=3, completion_url=f"{live_server.url}/healthz", completion_code="C0FFEE"
    )
    url = f"{live_server.url}/join/{token}/?PROLIFIC_PID=5f00aa"

    # The guidelines: an example per answer, then the consent line.
    page.goto(url)
    assert "how to label" in page.locator("h1").inner_text()
    assert page.locator("figure.example img").count() == 2
    assert page.evaluate("document.querySelector('figure.example img').naturalWidth") > 0
    page.screenshot(path=str(screenshots_dir() / "join-guidelines.png"))
    page.check("input[name=consent]")
    with page.expect_navigation():
        page.click("form.consent button")
    page.locator("#current-image").wait_for()
    first = _shown_id(page)
    _press_and_wait(page, "m", first)

    # Opening the link again (here: the same browser) continues where they stopped.
    page.goto(url)
    page.locator("#current-image").wait_for()
    second = _shown_id(page)
    assert second != first
    _press_and_wait(page, "f", second)
    third = _shown_id(page)
    with page.expect_navigation(url=f"{live_server.url}/join/done/"):
        page.keyboard.press("m")
    assert page.locator("#completion-code").inner_text() == "C0FFEE"
    assert page.locator("#completion-url").get_attribute("href") == f"{live_server.url}/healthz"
    page.screenshot(path=str(screenshots_dir() / "join-done.png"))
    participant = Participant.objects.get(panel_id="5f00aa")
    assert participant.finished_at is not None
    assert sorted(
        Label.objects.filter(annotator=participant.user).values_list("item_id", flat=True)
    ) == sorted([first, second, third])

    # A second id, in another browser, is another account.
    other = browser.new_context().new_page()
    other.goto(f"{live_server.url}/join/{token}/?PROLIFIC_PID=77bb")
    assert "how to label" in other.locator("h1").inner_text()
    assert Participant.objects.get(panel_id="77bb").user_id != participant.user_id
    other.context.close()

    # Closed, then expired: a page that says so, and no account.
    join_link_close(link=link)
    closed = browser.new_context().new_page()
    closed.goto(f"{live_server.url}/join/{token}/?PROLIFIC_PID=99cc")
    assert "has been closed" in closed.locator(".refusal").inner_text()
    closed.context.close()
    expired_link, expired_token = join_link_create(
        study=study, quota=3, completion_url=f"{live_server.url}/healthz", completion_code="X"
    )
    JoinLink.objects.filter(pk=expired_link.pk).update(expires_at=timezone.now())
    expired = browser.new_context().new_page()
    expired.goto(f"{live_server.url}/join/{expired_token}/?PROLIFIC_PID=99cc")
    assert "has expired" in expired.locator(".refusal").inner_text()
    expired.context.close()
    assert not Participant.objects.filter(panel_id="99cc").exists()
