"""The BiasPainter study in a browser: three pairs drawn for the age check, each already answered
by ben; anna sees each seed photo beside its edit and answers with one key. Where she agrees with
ben the answer is final, and the researcher's validation table changes from nothing checked to
the accuracy of the automatic verdicts (2 of 3: the "younger" pair looks the same to people)."""

from __future__ import annotations

import re

import pytest

from annotate import services
from annotate.models import FinalLabel
from protocols.pair_change.sampling import pairs_sample
from tests.browser.screenshots import screenshots_dir
from tests.factories import question_of
from tests.reports.pair_change_data import build, pair_key

pytestmark = pytest.mark.browser


@pytest.fixture
def pair_study(annotator_a, annotator_b):
    """The hand-worked study of ``tests.reports.pair_change_data``; one older, one younger and one
    unchanged pair drawn for the age check, answered by ben (older, same, same)."""
    fixture = build(slug="bp")
    fixture.study.annotators.add(annotator_a, annotator_b)
    draw = pairs_sample(
        study=fixture.study, attribute="age", sizes={"older": 1, "younger": 1, "unchanged": 1}, seed=0
    )
    verdicts = {entry["item"]: entry["verdict"] for entry in draw.record["items"]}
    ben = {"older": "older", "younger": "same", "unchanged": "same"}
    items = {}
    for key, verdict in verdicts.items():
        item = next(i for i in fixture.pairs.values() if i.key == key)
        services.label_import(
            item=item, question=question_of(item, "age"), annotator=annotator_b, value=ben[verdict]
        )
        items[item.pk] = (item, verdict)
    return fixture, items


def _chart(page, live_server) -> str:
    """The SVG of sd15's profession chart on the report page, once its image has loaded."""
    figure = page.locator("#chart-sd15-profession img")
    figure.scroll_into_view_if_needed()
    page.wait_for_function(
        "(el) => el.complete && el.naturalWidth > 0", arg=figure.element_handle(), timeout=20_000
    )
    return page.request.get(f"{live_server.url}{figure.get_attribute('src')}").text()


def _validation_row(page) -> list[str]:
    row = page.locator("#table-validation tbody tr").first
    return [cell.strip() for cell in row.locator("td").all_inner_texts()]


def test_answering_pair_questions_by_keyboard_updates_the_validation_table(
    page, browser, login, live_server, pair_study, annotator_a, researcher
):
    _fixture, items = pair_study
    assert pair_key("sd15", "nurse", "S1") in {item.key for item, _ in items.values()}

    # Rita's report before: three pairs drawn, none checked yet.
    login(page, live_server, researcher)
    page.goto(f"{live_server.url}/reports/?study=bp")
    assert _validation_row(page)[:3] == ["age", "all", "0"]
    assert _validation_row(page)[-1] == "3"  # awaiting an answer
    # Figure 4 of sd15's professions loads beside the tables, a bar per word and attribute.
    svg = _chart(page, live_server)
    assert 'id="bar-age-nurse"' in svg
    assert 'id="bar-skin-pilot"' in svg

    # Anna, in her own browser: each pair shows the seed photo beside the edit; one key answers.
    anna = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    login(anna, live_server, annotator_a)
    anna.goto(f"{live_server.url}/annotate/label/")
    keys = {"older": "o", "younger": "s", "unchanged": "s"}  # she agrees with ben on every pair
    for _ in range(len(items)):
        shown = anna.locator("#current-image")
        shown.wait_for()
        item_id = int(shown.get_attribute("data-item-id"))
        _item, verdict = items[item_id]
        assert anna.locator(".pair-input img").is_visible()  # the seed photo, beside the edit
        assert anna.locator("fieldset.question").count() <= 1  # only the age question
        anna.keyboard.press(keys[verdict])
        anna.wait_for_function(
            "(id) => !document.querySelector(`#current-image[data-item-id='${id}']`)", arg=item_id
        )
    anna.locator(".all-done").wait_for()
    anna.context.close()
    finals = {f.item_id: f.value for f in FinalLabel.objects.filter(item_id__in=items, question__key="age")}
    assert sorted(finals.values()) == ["older", "same", "same"]

    # Rita reloads: 3 checked, 2 agree with the automatic verdict (the "younger" pair did not).
    page.reload()
    row = _validation_row(page)
    assert row[:5] == ["age", "all", "3", "2", "66.7 %"]
    assert re.fullmatch(r"\[\d+\.\d, \d+\.\d\] %", row[5])
    younger = page.locator("#table-validation tbody tr", has_text="younger").first.inner_text()
    assert "0.0 %" in younger
    confusion = page.locator("#table-confusion_age tbody tr", has_text="younger").first
    assert [c.strip() for c in confusion.locator("td").all_inner_texts()] == ["younger", "0", "0", "1", "1"]
    assert page.locator("#overall-accuracy").inner_text() == "0.667"
    _chart(page, live_server)  # loaded for the screenshot
    shots = screenshots_dir()
    page.screenshot(path=str(shots / "pair-change-report.png"), full_page=True)
    page.wait_for_load_state("networkidle")

    # The drill-down from nurse: the drawn pair with both answers and its final one.
    page.goto(f"{live_server.url}/reports/pair-change/profession/nurse/?study=bp")
    nurse = next(item for item, verdict in items.values() if verdict == "older")
    card = page.locator(f"#pair-{nurse.pk}").inner_text()
    assert "anna: Older" in card
    assert "ben: Older" in card
    assert "yes, as older" in card
    page.screenshot(path=str(shots / "pair-change-word.png"), full_page=True)
    # Let the lazily loaded pictures finish before the live server's database goes away.
    page.wait_for_load_state("networkidle")
    page.goto("about:blank")
