"""The questions protocol in Chromium: an annotator answers every question of an
image with one key each and Enter; the report's answer-shares chart draws a bar per (group,
answer) with its 95 % interval whisker, and clicking a bar opens its images."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotate.models import Label
from studies.services import questions_csv_read, study_define
from tests.factories import ItemFactory, PromptFactory
from tests.protocols.questions.data import build_report_study, questions_csv

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BARS = """() => [...document.querySelectorAll('a.share-bar')].map((a) => {
  const rect = a.querySelector('rect').getBoundingClientRect();
  const ci = a.querySelector('line.ci').getBoundingClientRect();
  return {group: a.dataset.group, answer: a.dataset.answer, share: +a.dataset.share,
          width: rect.width, ciLeft: ci.left, ciRight: ci.right, barRight: rect.right};
})"""


def test_the_chart_shows_shares_with_intervals_and_a_bar_opens_its_images(
    page, login, live_server, researcher, tmp_path
):
    build_report_study(tmp_path)
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}{reverse('reports:overview')}?study=qs")
    bars = page.evaluate(BARS)
    assert len(bars) == 6  # two groups x three answers of "age" (wealth has no final answer)
    young = next(b for b in bars if b["group"] == "light" and b["answer"] == "young")
    middle = next(b for b in bars if b["group"] == "light" and b["answer"] == "middle")
    assert young["share"] == 0.75
    assert young["width"] > 100
    assert middle["width"] == 0
    # The whisker spans the bar's end: the Wilson interval contains the share.
    assert young["ciLeft"] < young["barRight"] < young["ciRight"]
    page.locator('a.share-bar[data-group="dark"][data-answer="old"]').click()
    page.wait_for_url("**/reports/questions/answer/**")
    assert page.locator("li.answer-image").count() == 3
    # The page is served before its images: wait for the first to load, then check it decoded.
    page.wait_for_function(
        "(el) => el.complete && el.naturalWidth > 0",
        arg=page.locator("li.answer-image img").first.element_handle(),
        timeout=20_000,
    )


def test_an_annotator_answers_every_question_with_one_key_each_and_enter(
    page, login, live_server, annotator_a, tmp_path
):
    study = study_define(
        slug="keys",
        protocol="questions",
        questions=questions_csv_read(questions_csv(tmp_path)),
        parameters={"compare": "skin"},
        labels_per_item=2,
    ).study
    study.annotators.add(annotator_a)
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt, metadata={"skin": skin}) for skin in ("light", "dark")]
    login(page, live_server, annotator_a)
    page.goto(f"{live_server.url}/annotate/keys/label/")
    for keys in (("o", "n"), ("m", "w")):
        shown = page.locator("#current-image")
        shown.wait_for()
        item_id = int(shown.get_attribute("data-item-id"))
        for key in keys:  # a key answers the active question and moves on to the next
            page.keyboard.press(key)
        page.keyboard.press("Enter")
        page.wait_for_function(
            "(id) => !document.querySelector(`#current-image[data-item-id='${id}']`)", arg=item_id
        )
    page.locator(".all-done").wait_for()
    stored = {
        (label.item_id, label.question.key): label.value
        for label in Label.objects.filter(annotator=annotator_a).select_related("question")
    }
    assert stored == {
        (items[0].pk, "age"): "old",
        (items[0].pk, "wealth"): "poor",
        (items[1].pk, "age"): "middle",
        (items[1].pk, "wealth"): "rich",
    }
