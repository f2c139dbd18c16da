"""The demo, as a new user walks through it (``seed_demo``: all five protocols), at 1280 x 800 and
375 x 812 CSS pixels: no page scrolls sideways on a phone; the guidelines frame a first visit
opens ends between two lines, never across one; the box check's captions never overlap and are
readable on a phone; and the attributes screen keeps its last question and "Save answers" above
a laptop's fold while the guidelines are open. One screenshot per screen and size goes to the
screenshots folder (tests/browser/screenshots.py)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotate.management.commands.seed_demo import DEMO_PASSWORDS
from tests.browser.screenshots import screenshots_dir
from tests.browser.test_phone_width import OVERFLOW

pytestmark = pytest.mark.browser

SIZES = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 375, "height": 812}}
DEMOS = ("demo", "demo-attributes", "demo-pairs", "demo-objects", "demo-questions")
# A caption on a phone at least this tall (its box, in CSS pixels): about a 13 px font.
CAPTION_MIN_HEIGHT = 16

# Every line of text (and key cap) in the guidelines frame that its visible bottom edge cuts.
CUT_LINES = """() => {
  const body = document.querySelector('#guidelines[open] .guidelines-body');
  if (!body) return null;
  const edge = body.getBoundingClientRect().top + body.clientTop + body.clientHeight;
  const cut = [];
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.trim()) continue;
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.top < edge - 1 && r.bottom > edge + 1) cut.push(node.textContent.trim().slice(0, 40));
    }
  }
  return {cut, scrolls: body.scrollHeight > body.clientHeight};
}"""

CAPTIONS = """() => [...document.querySelectorAll('.box-overlay text')].map((t) => {
  const r = t.getBoundingClientRect();
  return {text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom};
})"""

FOLD = """() => {
  const questions = [...document.querySelectorAll('#label-form fieldset.question')];
  return {
    guidelinesOpen: document.querySelector('#guidelines').open,
    lastQuestion: questions[questions.length - 1].getBoundingClientRect().bottom,
    save: document.querySelector('#label-form button[data-submit]').getBoundingClientRect().bottom,
  };
}"""


def _overlapping(captions: list[dict[str, Any]]) -> list[tuple[str, str]]:
    pairs = []
    for n, a in enumerate(captions):
        for b in captions[n + 1 :]:
            apart = a["right"] <= b["left"] or b["right"] <= a["left"]
            if not (apart or a["bottom"] <= b["top"] or b["bottom"] <= a["top"]):
                pairs.append((a["text"], b["text"]))
    return pairs


@pytest.fixture
def demo(live_server, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=io.StringIO())
    return live_server


def _logged_in(browser, live_server, username: str, size: dict[str, int]) -> tuple[Any, Any]:
    context = browser.new_context(viewport=size, device_scale_factor=1)
    context.set_default_timeout(20_000)
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORDS[username])
    with page.expect_navigation():
        page.keyboard.press("Enter")
    return context, page


def _researcher_pages() -> list[str]:
    overview = reverse("reports:overview")
    return [
        *(f"{overview}?study={slug}" for slug in DEMOS),
        reverse("annotate:disputes"),
        f"{overview}?study=welth",  # a mistyped study: the 400 page
    ]


def test_a_new_user_walks_the_demo_at_laptop_and_phone_size(browser, demo):
    problems: dict[str, Any] = {}
    shots = screenshots_dir()
    for size_name, size in SIZES.items():
        context, page = _logged_in(browser, demo, "demo-researcher", size)
        for url in _researcher_pages():
            page.goto(f"{demo.url}{url}")
            page.wait_for_load_state("load")
            measured = page.evaluate(OVERFLOW)
            if measured["scrollWidth"] > measured["innerWidth"]:
                problems[f"{size_name} {url} scrolls sideways"] = measured
        context.close()

        context, page = _logged_in(browser, demo, "demo-annotator-2", size)
        for slug in DEMOS:
            url = reverse("annotate:label_study", args=[slug])
            page.goto(f"{demo.url}{url}")
            page.wait_for_load_state("load")
            page.screenshot(path=str(shots / f"demo-label-{slug}-{size_name}.png"))
            measured = page.evaluate(OVERFLOW)
            if measured["scrollWidth"] > measured["innerWidth"]:
                problems[f"{size_name} {url} scrolls sideways"] = measured
            frame = page.evaluate(CUT_LINES)
            if frame is None:
                problems[f"{size_name} {url}: the guidelines are not open on a first visit"] = None
            elif frame["cut"]:
                problems[f"{size_name} {url}: the guidelines frame cuts lines"] = frame["cut"]
            captions = page.evaluate(CAPTIONS)
            if slug == "demo-objects":
                if len(captions) < 2:
                    problems[f"{size_name} {url}: no box captions"] = captions
                if overlapping := _overlapping(captions):
                    problems[f"{size_name} {url}: captions overlap"] = overlapping
                if size_name == "phone":
                    small = [c["text"] for c in captions if c["bottom"] - c["top"] < CAPTION_MIN_HEIGHT]
                    if small:
                        problems[f"{size_name} {url}: captions too small"] = small
            if slug == "demo-attributes" and size_name == "laptop":
                fold = page.evaluate(FOLD)
                assert fold["guidelinesOpen"]
                if max(fold["lastQuestion"], fold["save"]) > size["height"]:
                    problems[f"{size_name} {url}: below the fold"] = fold
        page.goto(f"{demo.url}/annotate/demo/lable/")  # a mistyped address: the 404 page
        if page.evaluate(OVERFLOW)["scrollWidth"] > size["width"]:
            problems[f"{size_name} 404 page scrolls sideways"] = None
        context.close()
    assert problems == {}
