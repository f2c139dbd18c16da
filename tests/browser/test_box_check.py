"""The box check of an object study, by keyboard: the detector's boxes drawn over the image and
scaled with it, one highlighted at a time; Y confirms and N rejects it and moves on, ← goes back,
/ opens the missed-objects field (COCO names suggested after each comma), Enter saves — and the
same screen without JavaScript, one radio pair per box."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image as PILImage

from annotate.models import Label
from tests.browser.screenshots import screenshots_dir
from tests.factories import ImageFactory, ItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.browser

BOXES = [
    {"class": "person", "confidence": 0.95, "box": [150.0, 40.0, 400.0, 512.0]},
    {"class": "tie", "confidence": 0.71, "box": [250.0, 300.0, 290.0, 420.0]},
    {"class": "cup", "confidence": 0.33, "box": [20.0, 20.0, 120.0, 100.0]},
]


def _photo():
    """scikit-image's astronaut (512 x 512) as a stored image file."""
    from skimage import data

    buffer = io.BytesIO()
    PILImage.fromarray(data.astronaut()).save(buffer, format="PNG")
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return ImageFactory(_stored=(digest, name), width=512, height=512)


@pytest.fixture
def box_study(annotator_a):
    study = StudyFactory(name="Objects", slug="objects", protocol="objects")
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study, category="template-0", word="man", text="A man holding an item")
    first = ItemFactory(prompt=prompt, image=_photo(), metadata={"gender": "male", "boxes": BOXES})
    second = ItemFactory(prompt=prompt, metadata={"gender": "male", "boxes": BOXES[1:2]})
    return study, first, second


def _shown(page, item) -> None:
    page.locator(f"#current-image[data-item-id='{item.pk}']").wait_for()


def _active(page) -> str | None:
    return page.locator(".box-overlay .box.active").get_attribute("data-box")


def _stored(item) -> dict[str, str]:
    return dict(Label.objects.filter(item=item).values_list("question__key", "value"))


def test_boxes_are_confirmed_and_rejected_with_the_keyboard(page, login, live_server, box_study, annotator_a):
    study, first, second = box_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, first)
    page.wait_for_function("document.getElementById('current-image').complete")

    # The boxes sit on the image at its displayed scale: the overlay covers the image exactly.
    image = page.locator("#current-image").bounding_box()
    overlay = page.locator(".box-overlay").bounding_box()
    for side in ("x", "y", "width", "height"):
        assert abs(image[side] - overlay[side]) < 1, side
    scale = image["width"] / 512
    tie = page.locator(".box-overlay .box[data-box='1'] rect").bounding_box()
    assert abs(tie["x"] - (image["x"] + 250 * scale)) < 3
    assert abs(tie["width"] - 40 * scale) < 4
    assert abs(tie["height"] - 120 * scale) < 4

    # One box highlighted at a time: the first; Y confirms it and moves to the next.
    assert page.locator(".box-overlay .box.active").count() == 1
    assert _active(page) == "0"
    page.screenshot(path=str(_shots() / "labeling-boxes.png"))
    page.keyboard.press("y")
    assert page.locator("input[name=answer_boxes_0][value=yes]").is_checked()
    assert _active(page) == "1"
    page.keyboard.press("n")
    assert page.locator("input[name=answer_boxes_1][value=no]").is_checked()
    assert _active(page) == "2"
    # ← goes back one box; Y changes its answer and the highlight goes on to the unanswered box.
    page.keyboard.press("ArrowLeft")
    assert _active(page) == "1"
    page.keyboard.press("y")
    assert page.locator("input[name=answer_boxes_1][value=yes]").is_checked()
    assert _active(page) == "2"
    page.keyboard.press("n")
    assert page.locator(".box-overlay .box.active").count() == 0  # every box answered
    assert page.locator(".box-overlay .box[data-box='2']").get_attribute("data-answer") == "no"

    # / opens the missed-objects field; after a comma the suggestions complete the next name.
    page.keyboard.press("/")
    missed = page.locator("input[name=answer_missed]")
    assert missed.evaluate("input => input === document.activeElement")
    page.keyboard.type("Sofa, ")
    assert page.locator("#class-names-missed option").first.get_attribute("value") == "Sofa, person"
    page.keyboard.type("cup")
    assert not Label.objects.exists()
    page.keyboard.press("Enter")
    _shown(page, second)
    assert _stored(first) == {"boxes": "yes,yes,no", "missed": "couch,cup"}

    # Enter before every box has its answer keeps the screen and says which box.
    page.keyboard.press("Enter")
    page.locator("p.error").wait_for()
    assert "Box 1 has no answer yet" in page.locator("p.error").inner_text()
    assert not Label.objects.filter(item=second).exists()
    page.keyboard.press("n")
    page.keyboard.press("Enter")
    page.locator(".all-done").wait_for()
    assert _stored(second) == {"boxes": "no", "missed": ""}


def test_without_javascript_each_box_is_a_radio_pair(browser, login, live_server, box_study, annotator_a):
    study, first, second = box_study
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, first)
    assert page.locator(".box-overlay .box").count() == 3  # drawn by the server, numbered
    assert page.locator(".box-overlay text").all_text_contents() == ["1 person", "2 tie", "3 cup"]
    for index, answer in enumerate(("yes", "no", "yes")):
        page.locator(f"input[name=answer_boxes_{index}][value={answer}]").check()
    page.fill("input[name=answer_missed]", "umbrella")
    with page.expect_navigation():
        page.locator("button[data-submit]").click()
    _shown(page, second)
    assert _stored(first) == {"boxes": "yes,no,yes", "missed": "umbrella"}
    context.close()


def _shots() -> Path:
    return screenshots_dir()
