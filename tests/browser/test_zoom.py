"""Zoom on the labeling screen: + and - (or the buttons) step fit → 100 % →
200 %, 0 fits again, Shift+arrows and a drag pan inside the image's frame (never the page); a pair
zooms and pans together; the next item starts fitted; a missing file raises no error; keys typed
into the reason field never zoom."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from PIL import Image as PILImage

from tests.factories import ImageFactory, ItemFactory, PairItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.browser

SIDE = 1536  # larger than the fitted frame, so fit, 100 % and 200 % all differ


def _big_photo(flip: bool = False):
    """The astronaut photograph at 1536 x 1536 (3 x), stored like an imported image."""
    from skimage import data

    array = np.kron(data.astronaut(), np.ones((3, 3, 1), dtype=np.uint8))
    if flip:
        array = array[::-1]
    buffer = io.BytesIO()
    PILImage.fromarray(array).save(buffer, format="PNG")
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return ImageFactory(_stored=(digest, name), width=SIDE, height=SIDE)


def _missing_file():
    """An image row whose file is gone (deleted from the media folder): the screen shows a
    broken image, and zooming must not throw."""
    image = ImageFactory(width=300, height=200)
    (Path(settings.MEDIA_ROOT) / str(image.file)).unlink()
    return image


def _errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _state(page) -> str:
    return page.locator("#label-region [data-zoom-state]").inner_text()


def _width(page, selector: str = "#current-image") -> float:
    return page.locator(selector).bounding_box()["width"]


def _frame(page, selector: str = "#current-image") -> dict:
    return page.evaluate(
        """(sel) => { const v = document.querySelector(sel).closest('[data-zoom-viewport]');
        return {sw: v.scrollWidth, cw: v.clientWidth, left: v.scrollLeft, top: v.scrollTop}; }""",
        selector,
    )


def _no_page_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_keys_and_buttons_zoom_the_image_pan_it_and_the_next_item_starts_fitted(
    page, login, live_server, study, annotator_a
):
    prompt = PromptFactory(study=study, category="profession", word="astronaut")
    first = ItemFactory(prompt=prompt, image=_big_photo())
    second = ItemFactory(prompt=prompt, image=_missing_file())
    ItemFactory(prompt=prompt)
    errors = _errors(page)
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    page.locator(f"#current-image[data-item-id='{first.pk}']").wait_for()
    page.wait_for_function("document.getElementById('current-image').naturalWidth > 0")

    assert _state(page) == "Fit"
    fitted = _width(page)
    assert fitted < SIDE

    page.keyboard.press("+")
    assert _state(page) == "100 %"
    assert _width(page) == pytest.approx(SIDE, abs=1)
    frame = _frame(page)
    assert frame["sw"] > frame["cw"]  # the frame scrolls ...
    assert _no_page_scroll(page)  # ... the page does not
    # Zooming keeps the middle of the image in the middle of the frame.
    assert frame["left"] == pytest.approx((SIDE - frame["cw"]) / 2, abs=2)

    page.keyboard.press("Shift+ArrowRight")
    assert _frame(page)["left"] > frame["left"]
    page.keyboard.press("Shift+ArrowDown")
    assert _frame(page)["top"] > frame["top"]

    page.keyboard.press("+")
    assert _state(page) == "200 %"
    assert _width(page) == pytest.approx(2 * SIDE, abs=1)
    page.keyboard.press("+")  # the last level stays
    assert _state(page) == "200 %"
    page.keyboard.press("-")
    assert _state(page) == "100 %"
    page.keyboard.press("0")
    assert _state(page) == "Fit"
    assert _width(page) == pytest.approx(fitted, abs=1)

    # The mouse: the buttons step and the level button cycles; a drag pans.
    page.locator("#label-region [data-zoom-step='1']").click()
    assert _state(page) == "100 %"
    before = _frame(page)["left"]
    frame_box = page.locator("[data-zoom-viewport]").bounding_box()
    x, y = frame_box["x"] + frame_box["width"] / 2, frame_box["y"] + frame_box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 120, y, steps=4)
    page.mouse.up()
    assert _frame(page)["left"] == pytest.approx(before + 120, abs=2)
    page.locator("#label-region [data-zoom-cycle]").click()
    assert _state(page) == "200 %"
    page.locator("#label-region [data-zoom-cycle]").click()
    assert _state(page) == "Fit"
    page.locator("#label-region [data-zoom-step='1']").click()
    assert _state(page) == "100 %"

    # Typing a reason never zooms: O opens the field, "+0-" is text; Esc closes it.
    page.keyboard.press("o")
    reason = page.locator("input[name=reason_gender]")
    assert reason.is_visible()
    page.keyboard.type("+0-")
    assert reason.input_value() == "+0-"
    assert _state(page) == "100 %"
    page.keyboard.press("Escape")

    # The next item starts fitted; its file is missing, and zooming it throws nothing.
    page.keyboard.press("m")
    page.locator(f"#current-image[data-item-id='{second.pk}']").wait_for()
    assert _state(page) == "Fit"
    assert page.locator("#label-region").get_attribute("data-zoom") is None
    page.keyboard.press("+")
    assert _state(page) == "100 %"
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("0")
    assert _state(page) == "Fit"
    assert errors == []


def test_a_pair_zooms_and_pans_together(page, login, live_server, annotator_a):
    study = StudyFactory(name="Pairs", slug="pairs", protocol="pair_change")
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study, category="profession", word="nurse", text="make them a nurse")
    first = PairItemFactory(prompt=prompt, image=_big_photo(flip=True), image__input=_big_photo())
    errors = _errors(page)
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    page.locator(f"#current-image[data-item-id='{first.pk}']").wait_for()
    page.wait_for_function("[...document.querySelectorAll('img.shown-image')].every(i => i.naturalWidth > 0)")

    assert _state(page) == "Fit"
    page.keyboard.press("+")
    page.keyboard.press("+")
    assert _state(page) == "200 %"
    assert _width(page, ".pair-input img") == pytest.approx(2 * SIDE, abs=1)
    assert _width(page, ".pair-output img") == pytest.approx(2 * SIDE, abs=1)
    assert _no_page_scroll(page)

    # Scrolling the seed photo's frame brings the edit's frame to the same place.
    page.evaluate("document.querySelector('.pair-input [data-zoom-viewport]').scrollTo(400, 300)")
    page.wait_for_function(
        """() => { const [a, b] = document.querySelectorAll('[data-zoom-viewport]');
        return Math.abs(a.scrollLeft - b.scrollLeft) <= 1 && Math.abs(a.scrollTop - b.scrollTop) <= 1
               && b.scrollLeft > 0; }"""
    )
    page.keyboard.press("Shift+ArrowLeft")
    page.wait_for_function(
        """() => { const [a, b] = document.querySelectorAll('[data-zoom-viewport]');
        return Math.abs(a.scrollLeft - b.scrollLeft) <= 1 && a.scrollLeft < 400; }"""
    )
    page.keyboard.press("0")
    assert _state(page) == "Fit"
    assert _width(page, ".pair-input img") < SIDE
    assert errors == []
