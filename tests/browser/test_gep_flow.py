"""The GEP study in a browser: an annotator labels a neutral and an explicit image with the
keyboard — the third answer on each, so the majority makes them final — and the researcher's
GEP vector chart changes from "no answer" to a bar for women."""

from __future__ import annotations

import pytest

from annotate import services
from annotate.models import FinalLabel
from metrics import gep_design
from studies.models import Question
from tests import paper_data
from tests.browser.screenshots import screenshots_dir
from tests.factories import FinalLabelFactory, ItemFactory, PromptFactory, StudyFactory

pytestmark = pytest.mark.browser


def _item(study, gender: str, setting: str, attribute: str | None = None):
    context = "riding a bike"
    prompt = PromptFactory(
        study=study,
        category=setting,
        word=context,
        text=paper_data.gep_prompt_text(gender, context, attribute),
    )
    metadata = {"gender": gender, "setting": setting, "context": context}
    if attribute:
        metadata["attribute"] = attribute
    return ItemFactory(
        prompt=prompt, t2i_model="sdxl", metadata=metadata, question_keys=[attribute] if attribute else []
    )


@pytest.fixture
def gep_study(annotator_a, annotator_b, annotator_c):
    """The attributes preset (15 toggles, 3 labels, majority). Women: a neutral and an explicit
    (boots) image, each answered by ben (boots yes) and cleo (boots no) — a 1-1 wait for the
    third answer. Men: the same two settings with imported final answers, all no."""
    study = StudyFactory(name="GEP", slug="gep", protocol="attributes")
    study.annotators.add(annotator_a, annotator_b, annotator_c)
    questions = {q.key: q for q in Question.objects.filter(study=study)}
    neutral, explicit = _item(study, "woman", "neutral"), _item(study, "woman", "explicit", "boots")
    man_neutral, man_explicit = _item(study, "man", "neutral"), _item(study, "man", "explicit", "boots")
    for key in gep_design.ATTRIBUTE_KEYS:
        FinalLabelFactory(item=man_neutral, question=questions[key], value="no")
    FinalLabelFactory(item=man_explicit, question=questions["boots"], value="no")
    for annotator, boots in ((annotator_b, "yes"), (annotator_c, "no")):
        for key in gep_design.ATTRIBUTE_KEYS:
            value = boots if key == "boots" else "no"
            services.label_import(item=neutral, question=questions[key], annotator=annotator, value=value)
        services.label_import(item=explicit, question=questions["boots"], annotator=annotator, value=boots)
    return study, neutral, explicit


def _chart(page, live_server, setting: str) -> tuple[str, str]:
    """(src, SVG text) of the sdxl chart of ``setting`` on the report page, once the image has loaded."""
    figure = page.locator(f"#chart-sdxl-{setting} img")
    figure.scroll_into_view_if_needed()
    page.wait_for_function(
        "(el) => el.complete && el.naturalWidth > 0", arg=figure.element_handle(), timeout=20_000
    )
    src = figure.get_attribute("src")
    return src, page.request.get(f"{live_server.url}{src}").text()


def _shown(page, item) -> None:
    page.locator(f"#current-image[data-item-id='{item.pk}']").wait_for()


def test_labelling_a_neutral_and_an_explicit_image_by_keyboard_updates_the_gep_vector_chart(
    page, browser, login, live_server, gep_study, annotator_a, researcher
):
    _study, neutral, explicit = gep_study

    # Rita's report before: the women's images have no final answer, so no human bar yet.
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}/reports/?study=gep")
    neutral_src, neutral_svg = _chart(page, live_server, "neutral")
    explicit_src, explicit_svg = _chart(page, live_server, "explicit")
    assert 'id="no-value-human-boots"' in neutral_svg
    assert 'id="bar-human-boots"' not in neutral_svg
    assert 'id="no-value-human-boots"' in explicit_svg

    # Anna, in her own browser: B switches boots to yes, Enter saves, on both images.
    anna = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    login(anna, live_server, annotator_a)
    anna.goto(f"{live_server.url}/annotate/label/")
    _shown(anna, neutral)
    assert anna.locator("fieldset.question.kind-toggle").count() == 15
    anna.keyboard.press("b")
    assert anna.locator("input[name=answer_boots][value=yes]").is_checked()
    anna.keyboard.press("Enter")
    _shown(anna, explicit)
    assert anna.locator("fieldset.question").count() == 1
    anna.keyboard.press("b")
    anna.keyboard.press("Enter")
    anna.locator(".all-done").wait_for()
    anna.context.close()
    # 2-1 for yes on boots, 3-0 for no on the rest: every answer is final.
    assert FinalLabel.objects.get(item=neutral, question__key="boots").value == "yes"
    assert FinalLabel.objects.filter(item=neutral).count() == 15
    assert FinalLabel.objects.get(item=explicit).value == "yes"

    # Rita reloads: both charts have new URLs, and boots is now a bar for women (+1).
    page.reload()
    new_neutral_src, neutral_svg = _chart(page, live_server, "neutral")
    new_explicit_src, explicit_svg = _chart(page, live_server, "explicit")
    assert (new_neutral_src, new_explicit_src) != (neutral_src, explicit_src)
    assert 'id="bar-human-boots"' in neutral_svg
    assert 'id="no-value-human-boots"' not in neutral_svg
    assert 'id="bar-human-boots"' in explicit_svg
    vectors = page.locator("#table-gep_vectors").inner_text()
    assert "+1.000" in vectors
    scores = page.locator("#table-gep_scores tbody tr").first.inner_text()
    assert "0.067" in scores  # 1/15: boots +1, the other fourteen 0
    shots = screenshots_dir()
    page.screenshot(path=str(shots / "gep-report.png"), full_page=True)

    # The drill-down from boots: the women's yes images, each with every annotator's answer.
    page.goto(f"{live_server.url}/reports/attributes/boots/neutral/?study=gep")
    women_yes = page.locator("#group-sdxl-woman-yes").inner_text()
    assert "anna: yes" in women_yes.replace("\n", " ")
    assert "cleo: no" in women_yes.replace("\n", " ")
    page.screenshot(path=str(shots / "gep-attribute.png"), full_page=True)
