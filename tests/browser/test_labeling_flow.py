"""Two annotators label a small study with the keyboard only; their one disagreement reaches the
dispute queue; a researcher resolves it with the keyboard; the export shows the final label. Then
one flow per protocol layout: a seed/edit pair side by side answered with keys, and fifteen
yes/no questions on one screen toggled with keys and saved with Enter."""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import pytest
from django.conf import settings
from PIL import Image as PILImage

from annotate.exports import ground_truth_export
from annotate.models import FinalLabel, Label
from studies.models import Question
from tests.browser.screenshots import screenshots_dir
from tests.factories import ImageFactory, ItemFactory, PairItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.browser


def _photo_file(array=None):
    """An image file that is a real photograph (scikit-image's astronaut unless given), as a
    generated portrait would be: the screenshots show what annotators see."""
    from skimage import data

    buffer = io.BytesIO()
    PILImage.fromarray(data.astronaut() if array is None else array).convert("RGB").save(buffer, format="PNG")
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    name = f"images/{digest[:2]}/{digest}.png"
    path = Path(settings.MEDIA_ROOT) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    height, width = (data.astronaut() if array is None else array).shape[:2]
    return ImageFactory(_stored=(digest, name), width=width, height=height)


@pytest.fixture
def small_study(study):
    prompt = PromptFactory(study=study, category="profession", word="astronaut")
    first = ItemFactory(prompt=prompt, image=_photo_file())
    return study, [first, ItemFactory(prompt=prompt), ItemFactory(prompt=prompt)]


def _shown(page, item) -> None:
    """Wait until ``item`` is the one on screen (swapped in by htmx)."""
    page.locator(f"#current-image[data-item-id='{item.pk}']").wait_for()


def _press(page, key: str, then_item=None) -> None:
    page.keyboard.press(key)
    if then_item is not None:
        _shown(page, then_item)


def test_two_annotators_label_by_keyboard_and_a_researcher_resolves_the_dispute(
    page, browser, login, live_server, small_study, annotator_a, annotator_b, researcher
):
    study, items = small_study

    # Anna: M, F, then O (reason field opens; Esc cancels), L; Z goes back one and F keeps it.
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, items[0])
    assert page.locator(".counter").inner_text() == "0 done · 3 remaining"
    assert page.locator(f"link[rel=preload][href='{items[1].item_images.get().image.url}']").count() == 1
    assert page.evaluate("document.getElementById('current-image').naturalWidth") == 512
    shots = screenshots_dir()
    page.screenshot(path=str(shots / "labeling.png"))
    _press(page, "m", then_item=items[1])
    assert page.locator(".counter").inner_text() == "1 done · 2 remaining"
    _press(page, "f", then_item=items[2])
    _press(page, "z", then_item=items[1])
    assert "Your label:" in page.locator(".current").inner_text()
    _press(page, "f", then_item=items[2])
    _press(page, "o")
    reason = page.locator("input[name=reason_gender]")
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
    _shown(ben, items[0])
    _press(ben, "f", then_item=items[1])
    _press(ben, "f", then_item=items[2])
    _press(ben, "o")
    ben.keyboard.type("a <i>mannequin</i>")
    ben.keyboard.press("Enter")
    ben.locator(".all-done").wait_for()
    _press(ben, "z", then_item=items[2])
    _press(ben, "l")
    ben.locator(".all-done").wait_for()
    ben.context.close()

    labels = {(lb.item_id, lb.annotator.username): lb for lb in Label.objects.select_related("annotator")}
    assert {k: v.value for k, v in labels.items()} == {
        (items[0].pk, "anna"): "male",
        (items[1].pk, "anna"): "female",
        (items[2].pk, "anna"): "low_quality",
        (items[0].pk, "ben"): "female",
        (items[1].pk, "ben"): "female",
        (items[2].pk, "ben"): "low_quality",
    }
    assert all(lb.duration_ms is not None for lb in labels.values())  # measured in the browser
    assert labels[(items[2].pk, "ben")].revisions.count() == 2  # other (with reason) → low quality

    # Rita: one dispute; she opens it and presses F.
    page.context.clear_cookies()
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}/annotate/disputes/")
    assert page.locator("table.disputes tbody tr").count() == 1
    page.goto(f"{live_server.url}/annotate/disputes/{items[0].pk}/")
    assert "anna" in page.locator("table.labels").inner_text()
    assert "Disputed" in page.locator(".facts").inner_text()
    page.screenshot(path=str(shots / "dispute.png"))
    with page.expect_navigation():
        page.keyboard.press("f")
    assert "No disputes" in page.content()

    final = FinalLabel.objects.get(item=items[0])
    assert (final.value, final.source, final.decided_by.username) == ("female", "resolved", "rita")
    rows = {r["item"]: r for r in csv.DictReader(io.StringIO(ground_truth_export(study=study, fmt="csv")))}
    assert rows[items[0].key]["final_label"] == "female"
    assert rows[items[0].key]["resolved_by"] == "rita"
    assert rows[items[1].key]["final_label"] == "female"
    assert rows[items[2].key]["final_label"] == "low_quality"


def test_a_double_key_press_and_key_repeat_store_one_label_and_advance_one_image(
    page, login, live_server, small_study, annotator_a
):
    study, items = small_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, items[0])
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
    _shown(page, items[1])
    page.wait_for_timeout(300)  # a second submit, if one had been sent, would land meanwhile
    assert len(posts) == 1  # the server would also store a repeat once (request_id), but none is sent
    assert Label.objects.filter(annotator=annotator_a).count() == 1
    assert page.locator(".counter").inner_text() == "1 done · 2 remaining"


def test_keys_are_htmx_requests_that_swap_the_region_and_a_signed_out_key_press_goes_to_log_in(
    page, login, live_server, small_study, annotator_a
):
    study, items = small_study
    login(page, live_server, annotator_a)
    screen = f"{live_server.url}/annotate/{study.slug}/label/"
    page.goto(screen)
    _shown(page, items[0])
    page.evaluate("window.samePage = true")  # gone if the browser loads a page
    sent: list = []
    page.on("request", lambda request: sent.append(request) if "/annotate/" in request.url else None)
    _press(page, "m", then_item=items[1])
    _press(page, "z", then_item=items[0])
    assert [(r.method, r.headers.get("hx-request"), r.headers.get("hx-target")) for r in sent] == [
        ("POST", "true", "label-region"),
        ("GET", "true", "label-region"),
    ]
    assert page.evaluate("window.samePage") is True
    assert "Your label:" in page.locator(".current").inner_text()

    page.context.clear_cookies(name="sessionid")  # the session ended; the CSRF cookie stays
    with page.expect_navigation(url=f"{live_server.url}/accounts/login/?next=/annotate/{study.slug}/label/"):
        page.keyboard.press("f")
    assert Label.objects.get(item=items[0], annotator=annotator_a).value == "male"


def test_labeling_works_without_javascript(browser, login, live_server, small_study, annotator_b):
    study, items = small_study
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    login(page, live_server, annotator_b)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, items[0])
    with page.expect_navigation():
        page.click("button[value=female]")
    _shown(page, items[1])
    with page.expect_navigation():
        page.click("button[value=other]")  # no reason given
    assert "reason" in page.locator("p.error").inner_text().lower()
    _shown(page, items[1])
    page.fill("input[name=reason_gender]", "a statue")
    with page.expect_navigation():
        page.click("button[value=other]")
    _shown(page, items[2])
    assert Label.objects.get(item=items[1], annotator=annotator_b).reason == "a statue"
    assert Label.objects.get(item=items[0], annotator=annotator_b).duration_ms is not None
    context.close()


def test_typing_a_reason_after_an_empty_other_never_fires_label_keys(
    page, login, live_server, small_study, annotator_a
):
    # QA found: O, Enter with no reason, then typing "man in a suit" labelled the next image
    # male, because the focus had left the reason field.
    _study, items = small_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, items[0])
    _press(page, "o")
    _press(page, "Enter")
    page.locator("p.error").wait_for()
    assert "reason" in page.locator("p.error").inner_text()
    page.keyboard.type("man in a suit, face hidden")
    assert not Label.objects.exists()
    _press(page, "Enter", then_item=items[1])
    label = Label.objects.get()
    assert (label.item_id, label.value, label.reason) == (
        items[0].pk,
        "other",
        "man in a suit, face hidden",
    )


# --- one flow per protocol layout -----------------------------------------------------------------


def _boxes(page, selector: str):
    return page.locator(selector).bounding_box()


def test_a_pair_is_shown_side_by_side_and_answered_with_the_keyboard(
    page, login, live_server, annotator_a, annotator_b
):
    from skimage import data

    study = StudyFactory(name="Pairs", slug="pairs", protocol="pair_change")
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study, category="profession", word="nurse", text="make them a nurse")
    seed = _photo_file(data.astronaut())
    first = PairItemFactory(prompt=prompt, image=_photo_file(data.astronaut()[::-1]), image__input=seed)
    second = PairItemFactory(prompt=prompt, image__input=seed)

    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, first)
    # Seed on the left, edit on the right, each labelled, side by side at the same height.
    seed_box, edit_box = _boxes(page, ".pair-input img"), _boxes(page, ".pair-output img")
    assert seed_box["x"] + seed_box["width"] <= edit_box["x"]
    assert abs(seed_box["y"] - edit_box["y"]) < 2
    assert page.locator(".pair-input figcaption").inner_text() == "Seed photo"
    assert page.locator(".pair-output figcaption").inner_text() == "Edited image"
    assert page.locator("fieldset.question").count() == 3
    page.screenshot(path=str(_shots() / "labeling-pair.png"))

    # O answers the active question (age: older) and moves on; 2 is gender's "male → female";
    # S is both age's and skin's "same": it answers the active question, skin. Enter saves.
    _press(page, "o")
    assert page.locator("input[name=answer_age][value=older]").is_checked()
    assert "active" in page.locator("fieldset[data-question=gender]").get_attribute("class")
    _press(page, "2")
    _press(page, "s")
    assert page.locator("input[name=answer_skin][value=same]").is_checked()
    assert not page.locator("input[name=answer_age][value=same]").is_checked()
    _press(page, "Enter", then_item=second)
    stored = dict(Label.objects.filter(item=first).values_list("question__key", "value"))
    assert stored == {"age": "older", "gender": "male_female", "skin": "same"}
    assert all(label.duration_ms is not None for label in Label.objects.filter(item=first))

    # Enter with a question unanswered keeps the screen and says which one.
    _press(page, "y")
    _press(page, "Enter")
    page.locator("p.error").wait_for()
    assert "gender" in page.locator("p.error").inner_text()
    assert page.locator("input[name=answer_age][value=younger]").is_checked()
    # Z goes back to the first pair with its answers drawn in; a change is saved with Enter.
    _press(page, "z", then_item=first)
    assert page.locator("input[name=answer_gender][value=male_female]").is_checked()
    page.locator("fieldset[data-question=skin] label.choice", has_text="Darker").click()
    _press(page, "Enter", then_item=second)
    assert Label.objects.get(item=first, question__key="skin").value == "darker"


def test_fifteen_yes_no_questions_on_one_screen_are_toggled_with_keys_and_saved_with_enter(
    page, login, live_server, annotator_a
):
    study = StudyFactory(name="Attributes", slug="attrs", protocol="attributes")
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    neutral = ItemFactory(prompt=prompt, image=_photo_file())
    explicit = ItemFactory(prompt=prompt, question_keys=["boots"])
    questions = {question.key: question for question in Question.objects.filter(study=study)}

    login(page, live_server, annotator_a)  # home sends an annotator straight to the labeling screen
    _shown(page, neutral)
    # The guidelines are open on the first visit and list the keys; later visits keep them shut.
    assert page.locator("#guidelines").get_attribute("open") is not None
    assert questions["boots"].text in page.locator("#guidelines").inner_text()
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, neutral)
    assert page.locator("#guidelines").get_attribute("open") is None
    assert page.locator("fieldset.question.kind-toggle").count() == 15
    assert page.locator("input[type=radio][value=no]:checked").count() == 15  # every default
    # The image and the questions side by side, the questions all in view.
    image_box, list_box = _boxes(page, "#current-image"), _boxes(page, ".questions")
    assert image_box["x"] + image_box["width"] <= list_box["x"]
    assert list_box["y"] + list_box["height"] <= 900

    for key in ("boots", "shirt", "hat", "hat"):  # hat twice: switched on, then off again
        _press(page, questions[key].hotkey)
    assert page.locator("input[name=answer_boots][value=yes]").is_checked()
    assert page.locator("input[name=answer_hat][value=no]").is_checked()
    page.screenshot(path=str(_shots() / "labeling-attributes.png"))
    _press(page, "Enter", then_item=explicit)
    stored = dict(Label.objects.filter(item=neutral).values_list("question__key", "value"))
    assert len(stored) == 15
    assert {key for key, value in stored.items() if value == "yes"} == {"boots", "shirt"}

    # The explicit item asks one question: B switches it, Enter saves.
    assert page.locator("fieldset.question").count() == 1
    _press(page, "b")
    _press(page, "Enter")
    page.locator(".all-done").wait_for()
    assert dict(Label.objects.filter(item=explicit).values_list("question__key", "value")) == {"boots": "yes"}


def _shots() -> Path:
    return screenshots_dir()


def test_a_multi_question_screen_works_without_javascript(browser, login, live_server, annotator_a):
    study = StudyFactory(name="Attributes", slug="attrs", protocol="attributes")
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study)
    first, second = ItemFactory(prompt=prompt), ItemFactory(prompt=prompt)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/{study.slug}/label/")
    _shown(page, first)
    page.locator("fieldset[data-question=jeans] label.choice", has_text="Yes").click()
    with page.expect_navigation():
        page.click("button.submit-answers")
    _shown(page, second)
    stored = dict(Label.objects.filter(item=first).values_list("question__key", "value"))
    assert {key for key, value in stored.items() if value == "yes"} == {"jeans"}
    assert len(stored) == 15
    context.close()


def test_other_with_a_reason_then_back_then_female_sends_no_reason(
    page, login, live_server, small_study, annotator_a
):
    """Regression: O, a reason, Enter, Z, F stored "female" with the old reason. The change form
    shows the reason typed for "other"; keys.js must not send it with F (the server drops it
    as well, which tests/annotate covers)."""
    _study, items = small_study
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/label/")
    _shown(page, items[0])
    _press(page, "o")
    page.keyboard.type("cartoon, not a photo")
    _press(page, "Enter", then_item=items[1])
    _press(page, "z", then_item=items[0])
    assert page.locator("input[name=reason_gender]").input_value() == "cartoon, not a photo"
    posts: list[str] = []
    page.on("request", lambda request: request.method == "POST" and posts.append(request.post_data or ""))
    _press(page, "f", then_item=items[1])
    assert len(posts) == 1
    assert "answer_gender" in posts[0]
    assert "cartoon" not in posts[0]
    label = Label.objects.get(item=items[0], annotator=annotator_a)
    assert (label.value, label.reason) == ("female", "")
