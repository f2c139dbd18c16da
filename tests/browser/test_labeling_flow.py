"""Two annotators label a small study with the keyboard only; their one disagreement reaches the
dispute queue; a researcher resolves it with the keyboard; the export shows the final label."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image as PILImage

from annotate.exchange import ground_truth_export
from annotate.models import FinalLabel, Label
from tests.factories import ImageFactory, PromptFactory

pytestmark = pytest.mark.browser


def _photo(prompt):
    """An image row whose file is a real photograph (scikit-image's astronaut), as a
    generated portrait would be: the screenshot shows what annotators see."""
    from skimage import data

    buffer = io.BytesIO()
    PILImage.fromarray(data.astronaut()).save(buffer, format="PNG")
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return ImageFactory(prompt=prompt, _stored=(digest, name), width=512, height=512)


@pytest.fixture
def small_study(study):
    prompt = PromptFactory(study=study, category="profession", word="astronaut")
    return study, [_photo(prompt), ImageFactory(prompt=prompt), ImageFactory(prompt=prompt)]


def _shown(page, image) -> None:
    """Wait until ``image`` is the one on screen (swapped in by label.js)."""
    page.locator(f"#current-image[data-image-id='{image.pk}']").wait_for()


def _press(page, key: str, then_image=None) -> None:
    page.keyboard.press(key)
    if then_image is not None:
        _shown(page, then_image)


def test_two_annotators_label_by_keyboard_and_a_researcher_resolves_the_dispute(
    page, browser, login, live_server, small_study, annotator_a, annotator_b, researcher
):
    study, images = small_study

    # Anna: M, F, then O (reason field opens; Esc cancels), L; Z goes back one and F keeps it.
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, images[0])
    assert page.locator(".counter").inner_text() == "0 done · 3 remaining"
    assert page.locator(f"link[rel=preload][href='{images[1].url}']").count() == 1
    assert page.evaluate("document.getElementById('current-image').naturalWidth") == 512
    shots = Path(settings.BASE_DIR) / "test-output"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "labeling.png"))
    _press(page, "m", then_image=images[1])
    assert page.locator(".counter").inner_text() == "1 done · 2 remaining"
    _press(page, "f", then_image=images[2])
    _press(page, "z", then_image=images[1])
    assert "Your label:" in page.locator(".current").inner_text()
    _press(page, "f", then_image=images[2])
    _press(page, "o")
    reason = page.locator("input[name=reason]")
    assert reason.is_visible()
    page.keyboard.type("<b>not sure</b>")
    _press(page, "Escape")
    assert not reason.is_visible()
    _press(page, "l")
    page.locator(".all-done").wait_for()
    assert page.locator(".counter").inner_text() == "3 done · 0 remaining"

    # Ben, in his own browser context: F, F, then O with a reason (Enter saves) — then he
    # goes back one (Z) and sets L, agreeing with Anna.
    ben = browser.new_context().new_page()
    login(ben, live_server, annotator_b)
    ben.goto(f"{live_server.url}/annotate/label/")
    _shown(ben, images[0])
    _press(ben, "f", then_image=images[1])
    _press(ben, "f", then_image=images[2])
    _press(ben, "o")
    ben.keyboard.type("a <i>mannequin</i>")
    ben.keyboard.press("Enter")
    ben.locator(".all-done").wait_for()
    _press(ben, "z", then_image=images[2])
    _press(ben, "l")
    ben.locator(".all-done").wait_for()
    ben.context.close()

    labels = {(lb.image_id, lb.annotator.username): lb for lb in Label.objects.select_related("annotator")}
    assert {k: v.value for k, v in labels.items()} == {
        (images[0].pk, "anna"): "male",
        (images[1].pk, "anna"): "female",
        (images[2].pk, "anna"): "low_quality",
        (images[0].pk, "ben"): "female",
        (images[1].pk, "ben"): "female",
        (images[2].pk, "ben"): "low_quality",
    }
    assert all(lb.duration_ms is not None for lb in labels.values())  # measured in the browser
    assert labels[(images[2].pk, "ben")].revisions.count() == 2  # other (with reason) → low quality

    # Rita: one dispute; she opens it and presses F.
    page.context.clear_cookies()
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}/annotate/disputes/")
    assert page.locator("table.disputes tbody tr").count() == 1
    page.goto(f"{live_server.url}/annotate/disputes/{images[0].pk}/")
    assert "anna" in page.locator("table.labels").inner_text()
    assert "disputed" in page.locator(".facts").inner_text()
    page.screenshot(path=str(shots / "dispute.png"))
    with page.expect_navigation():
        page.keyboard.press("f")
    assert "No disputes" in page.content()

    final = FinalLabel.objects.get(image=images[0])
    assert (final.value, final.source, final.decided_by.username) == ("female", "resolved", "rita")
    rows = {r["image"]: r for r in csv.DictReader(io.StringIO(ground_truth_export(study=study, fmt="csv")))}
    assert rows[images[0].source_path]["final_label"] == "female"
    assert rows[images[0].source_path]["resolved_by"] == "rita"
    assert rows[images[1].source_path]["final_label"] == "female"
    assert rows[images[2].source_path]["final_label"] == "low_quality"


def test_a_double_key_press_and_key_repeat_store_one_label_and_advance_one_image(
    page, login, live_server, small_study, annotator_a
):
    study, images = small_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, images[0])
    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url) if request.method == "POST" else None)
    # Three keydowns in the same task: the second arrives while the first is in flight, the
    # third is an auto-repeat. Only the first may count.
    page.evaluate(
        """() => {
          const down = (repeat) => document.dispatchEvent(
            new KeyboardEvent("keydown", { key: "m", bubbles: true, repeat: repeat }));
          down(false); down(false); down(true);
        }"""
    )
    _shown(page, images[1])
    page.wait_for_timeout(300)  # a second submit, if one had been sent, would land meanwhile
    assert len(posts) == 1  # the server would also store a repeat once (request_id), but none is sent
    assert Label.objects.filter(annotator=annotator_a).count() == 1
    assert page.locator(".counter").inner_text() == "1 done · 2 remaining"


def test_labeling_works_without_javascript(browser, login, live_server, small_study, annotator_b):
    study, images = small_study
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    login(page, live_server, annotator_b)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, images[0])
    with page.expect_navigation():
        page.click("button[value=female]")
    _shown(page, images[1])
    with page.expect_navigation():
        page.click("button[value=other]")  # no reason given
    assert "reason" in page.locator("p.error").inner_text().lower()
    _shown(page, images[1])
    page.fill("input[name=reason]", "a statue")
    with page.expect_navigation():
        page.click("button[value=other]")
    _shown(page, images[2])
    assert Label.objects.get(image=images[1], annotator=annotator_b).reason == "a statue"
    assert Label.objects.get(image=images[0], annotator=annotator_b).duration_ms is not None
    context.close()


def test_typing_a_reason_after_an_empty_other_never_fires_label_keys(
    page, login, live_server, small_study, annotator_a
):
    # QA found: O, Enter with no reason, then typing "man in a suit" labelled the next image
    # male, because the focus had left the reason field.
    _study, images = small_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, images[0])
    _press(page, "o")
    _press(page, "Enter")
    page.locator("p.error").wait_for()
    assert "reason" in page.locator("p.error").inner_text()
    page.keyboard.type("man in a suit, face hidden")
    assert not Label.objects.exists()
    _press(page, "Enter", then_image=images[1])
    label = Label.objects.get()
    assert (label.image_id, label.value, label.reason) == (
        images[0].pk,
        "other",
        "man in a suit, face hidden",
    )
