"""Every labeling screen on a phone: at 375 x 812 CSS pixels the gender, attributes,
pair and box-check screens show the image at least 90 % of the screen wide, never scroll
sideways, keep the study's name on one or two lines, and take every answer by touch — a tap on
a button or an answer's label, then a tap on "Save answers" — not only by key. One screenshot
per screen goes to the screenshots folder (tests/browser/screenshots.py). And on a laptop (1280 x 800), the guidelines that open on
a first visit leave the image in view."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from PIL import Image as PILImage

from annotate.models import Label
from tests.browser.screenshots import screenshots_dir
from tests.factories import ImageFactory, ItemFactory, PairItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.browser

PHONE = {"width": 375, "height": 812}
LAPTOP = {"width": 1280, "height": 800}
# WCAG 2.2's minimum target size (2.5.8) for anything a finger must hit.
TARGET = 24
BOXES = [
    {"class": "person", "confidence": 0.95, "box": [150.0, 40.0, 400.0, 512.0]},
    {"class": "tie", "confidence": 0.71, "box": [250.0, 300.0, 290.0, 420.0]},
]

# What a phone user would hit: the page's width against the window's, the image's width, the
# title's height in lines, and every touch target's box (answers, Save, Back).
MEASURE = """() => {
  const image = document.getElementById('current-image').getBoundingClientRect();
  const title = document.querySelector('.label-head h1');
  const lineHeight = parseFloat(getComputedStyle(title).lineHeight);
  const targets = [...document.querySelectorAll(
    '#label-form button[data-answer], #label-form label.choice, #label-form button[data-submit], #label-form a.undo'
  )].map((el) => {
    const box = el.getBoundingClientRect();
    return {text: el.innerText.trim(), left: box.left, right: box.right, width: box.width, height: box.height};
  });
  return {
    innerWidth: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    imageWidth: image.width,
    pairWidths: [...document.querySelectorAll('.label-pair img.shown-image')].map((i) => i.getBoundingClientRect().width),
    titleWidth: title.getBoundingClientRect().width,
    titleLines: Math.round(title.getBoundingClientRect().height / lineHeight),
    targets,
  };
}"""


def _photo(array: Any = None) -> Any:
    """scikit-image's astronaut (512 x 512) unless given, as a stored image file: the
    screenshots show what an annotator sees."""
    from skimage import data

    pixels = data.astronaut() if array is None else array
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).convert("RGB").save(buffer, format="PNG")
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    height, width = pixels.shape[:2]
    return ImageFactory(_stored=(digest, name), width=width, height=height)


def _study(protocol: str, annotator: Any) -> tuple[Any, Any, Any]:
    """A study of ``protocol`` with a long name (it must wrap by word, not by letter) and two
    items for ``annotator``; the first is a real photograph."""
    from skimage import data

    study = StudyFactory(
        name=f"Occupations and what people wear ({protocol} protocol, second round)",
        slug=f"phone-{protocol}".replace("_", "-"),
        protocol=protocol,
    )
    study.annotators.add(annotator)
    prompt = PromptFactory(
        study=study, category="profession", word="astronaut", text="a photo of an astronaut"
    )
    if protocol == "pair_change":
        seed = _photo(data.astronaut()[::-1])
        first = PairItemFactory(prompt=prompt, image=_photo(), image__input=seed)
        second = PairItemFactory(prompt=prompt, image__input=seed)
    else:
        metadata = {"gender": "male", "boxes": BOXES} if protocol == "objects" else {}
        first = ItemFactory(prompt=prompt, image=_photo(), metadata=metadata)
        second = ItemFactory(prompt=prompt, metadata=metadata)
    return study, first, second


def _shown(page: Any, item: Any) -> None:
    page.locator(f"#current-image[data-item-id='{item.pk}']").wait_for()
    page.wait_for_function("[...document.querySelectorAll('img.shown-image')].every((i) => i.complete)")


def _tap_choice(page: Any, question: str, value: str) -> None:
    page.locator(f"fieldset[data-question={question}] label.choice:has(input[value={value}])").tap()


def _answer_by_touch(page: Any, protocol: str) -> dict[str, str]:
    """Tap one answer per question (and Save where the screen asks several); the labels to
    expect."""
    if protocol == "gender":
        page.locator("#label-form button[data-answer][value=female]").tap()
        return {"gender": "female"}
    if protocol == "attributes":
        _tap_choice(page, "boots", "yes")
        _tap_choice(page, "tie", "yes")
        _tap_choice(page, "tie", "no")
    elif protocol == "pair_change":
        _tap_choice(page, "age", "older")
        _tap_choice(page, "gender", "male_female")
        _tap_choice(page, "skin", "same")
    elif protocol == "objects":
        rows = page.locator("[data-box-check] .box-row")
        rows.nth(0).locator("label.choice:has(input[value=yes])").tap()
        rows.nth(1).locator("label.choice:has(input[value=no])").tap()
    page.locator("#label-form button[data-submit]").tap()
    return {
        "attributes": {"boots": "yes", "tie": "no"},
        "pair_change": {"age": "older", "gender": "male_female", "skin": "same"},
        "objects": {"boxes": "yes,no"},
    }[protocol]


@pytest.mark.parametrize("protocol", ["gender", "attributes", "pair_change", "objects"])
def test_every_labeling_screen_fits_a_phone_and_is_answered_by_touch(
    browser, login, live_server, annotator_a, protocol
):
    study, first, second = _study(protocol, annotator_a)
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, has_touch=True)
    context.set_default_timeout(20_000)
    page = context.new_page()
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, first)
    measured = page.evaluate(MEASURE)
    shot = screenshots_dir() / f"labeling-{protocol}-375.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")

    assert measured["innerWidth"] == PHONE["width"]
    assert measured["scrollWidth"] <= measured["innerWidth"], "the page scrolls sideways"
    for width in measured["pairWidths"] or [measured["imageWidth"]]:
        assert width >= 0.9 * PHONE["width"], f"the image is {width:.0f} px wide"
    # The study's name wraps by word across the screen, not letter by letter in a narrow column.
    assert measured["titleWidth"] >= 0.8 * PHONE["width"], measured["titleWidth"]
    assert measured["titleLines"] <= 3, f"the study's name takes {measured['titleLines']} lines"
    assert measured["targets"], "no touch target"
    for target in measured["targets"]:
        assert 0 <= target["left"] < target["right"] <= PHONE["width"], target
        assert min(target["width"], target["height"]) >= TARGET, target

    expected = _answer_by_touch(page, protocol)
    _shown(page, second)
    stored = dict(Label.objects.filter(item=first).values_list("question__key", "value"))
    if protocol == "objects":
        stored = {"boxes": stored["boxes"]}
    elif protocol == "attributes":
        stored = {key: stored[key] for key in expected}
    assert stored == expected
    # Back one, by touch too.
    page.locator("#label-form a.undo").tap()
    _shown(page, first)
    context.close()


@pytest.mark.parametrize("protocol", ["gender", "attributes"])
def test_the_guidelines_of_a_first_visit_leave_the_image_in_view_on_a_laptop(
    browser, login, live_server, annotator_a, protocol
):
    study, first, _ = _study(protocol, annotator_a)
    study.description = "\n\n".join(
        f"Rule {n}: look at the whole image before answering; an unclear picture is low quality."
        for n in range(1, 7)
    )
    study.save(update_fields=["description"])
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    login(page, live_server, annotator_a)  # home sends her straight to her one study's screen
    _shown(page, first)
    assert page.locator("#guidelines").get_attribute("open") is not None  # her first visit
    page.screenshot(path=str(screenshots_dir() / f"labeling-{protocol}-1280-guidelines.png"))
    image = page.locator("#current-image").bounding_box()
    assert image["y"] + image["height"] <= LAPTOP["height"], (
        f"the image ends at {image['y'] + image['height']:.0f} px"
    )
    assert image["height"] >= 0.4 * LAPTOP["height"], f"the image is {image['height']:.0f} px high"
    # The answers are in view too: the buttons of one question, or the first questions of many.
    answers = page.locator(
        "#label-form .label-buttons" if protocol == "gender" else "#label-form fieldset.question >> nth=2"
    ).bounding_box()
    assert answers["y"] + answers["height"] <= LAPTOP["height"]
    context.close()
