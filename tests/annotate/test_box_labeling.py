"""The box check of an objects study: the detector's boxes drawn over the image, one yes/no per
box (radio pairs without JavaScript), missed objects as COCO class names; the answer has one
value per box of the item, and class names are written in one spelling."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotate import services
from annotate.errors import InvalidLabel
from annotate.models import Label
from metrics.coco_names import COCO_CLASS_NAMES
from protocols.objects import kinds as box_kinds
from tests.factories import ImageFactory, ItemFactory, PromptFactory, StudyFactory, question_of

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}

BOXES = [
    {"class": "tie", "confidence": 0.91, "box": [10.0, 20.0, 60.0, 120.0]},
    {"class": "cup", "confidence": 0.48, "box": [100.0, 150.0, 140.0, 190.0]},
    {"class": "dog", "confidence": 0.3, "box": [0.0, 0.0, 200.0, 100.0]},
]


@pytest.fixture
def study(annotator_a, annotator_b):
    study = StudyFactory(name="Objects", slug="objects", protocol="objects")
    study.annotators.add(annotator_a, annotator_b)
    return study


@pytest.fixture
def item(study):
    image = ImageFactory(width=200, height=300)
    return ItemFactory(
        prompt=PromptFactory(study=study),
        image=image,
        metadata={"gender": "male", "boxes": BOXES, "boxes_source": "yolo_objects@1"},
    )


def _label_url(study) -> str:
    return reverse("annotate:label_study", args=[study.slug])


def _submit_url(item) -> str:
    return reverse("annotate:label_submit", args=[item.study.slug, item.pk])


def _html(response) -> str:
    return response.content.decode()


def _checked(html: str) -> dict[str, str]:
    """{radio name: checked value} of the page's checked radios."""
    return dict(re.findall(r'name="([^"]+)" value="([^"]+)" checked', html))


def _stored(item, annotator) -> dict[str, str]:
    return dict(Label.objects.filter(item=item, annotator=annotator).values_list("question__key", "value"))


# --- the service: one answer per box, one spelling per class ------------------------------------


def test_a_box_answer_must_have_one_value_per_box_of_the_item(item):
    question = question_of(item, "boxes")
    assert services.answer_validate(question, "yes, no,yes", item=item) == "yes,no,yes"
    with pytest.raises(
        InvalidLabel, match=r"has 2 value\(s\) for the 3 box\(es\) of item .*answer each box once"
    ):
        services.answer_validate(question, "yes,no", item=item)
    with pytest.raises(InvalidLabel, match=r"has 4 value\(s\) for the 3 box\(es\)"):
        services.answer_validate(question, "yes,no,yes,yes", item=item)


def test_an_item_without_boxes_in_its_metadata_takes_any_number_of_box_answers(study):
    plain = ItemFactory(prompt=PromptFactory(study=study))
    assert services.answer_validate(question_of(plain, "boxes"), "yes,no", item=plain) == "yes,no"


def test_an_item_whose_detector_found_nothing_takes_only_the_empty_answer(study):
    empty = ItemFactory(prompt=PromptFactory(study=study), metadata={"boxes": []})
    question = question_of(empty, "boxes")
    assert services.answer_validate(question, "", item=empty) == ""
    with pytest.raises(InvalidLabel, match=r"1 value\(s\) for the 0 box\(es\)"):
        services.answer_validate(question, "yes", item=empty)


def test_a_submit_with_too_few_box_answers_is_refused_and_stores_nothing(item, annotator_a):
    services.assignment_queue(study=item.study, annotator=annotator_a)
    with pytest.raises(InvalidLabel, match=r"2 value\(s\) for the 3 box\(es\)"):
        services.annotation_submit(
            item=item, annotator=annotator_a, answers={"boxes": "yes,no", "missed": ""}
        )
    assert not Label.objects.exists()


def test_a_researcher_cannot_set_a_final_box_answer_of_the_wrong_length(item, researcher):
    with pytest.raises(InvalidLabel, match=r"1 value\(s\) for the 3 box\(es\)"):
        services.final_label_set(
            item=item, question=question_of(item, "boxes"), value="yes", decided_by=researcher
        )


def test_missed_class_names_are_written_in_ultralytics_spelling(item):
    question = question_of(item, "missed")
    assert (
        services.answer_validate(question, " Cup, TV monitor,sofa , cellphone,, ")
        == "cup,tv,couch,cell phone"
    )
    assert services.answer_validate(question, "") == ""


def test_an_unknown_class_name_is_refused_with_close_names(item):
    with pytest.raises(InvalidLabel, match=r"“missed”: unknown object class 'cupp'; did you mean 'cup'"):
        services.answer_validate(question_of(item, "missed"), "dog, cupp")


# --- the screen -----------------------------------------------------------------------------


def test_the_screen_draws_each_box_over_the_image_in_its_pixel_coordinates(client_for, annotator_a, item):
    html = _html(client_for(annotator_a).get(_label_url(item.study)))
    assert 'class="box-overlay" viewBox="0 0 200 300" preserveAspectRatio="xMidYMid meet"' in html
    rects = re.findall(
        r'<g class="box" data-box="(\d)"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"',
        html,
    )
    assert rects == [
        ("0", "10.0", "20.0", "50.0", "100.0"),
        ("1", "100.0", "150.0", "40.0", "40.0"),
        ("2", "0.0", "0.0", "200.0", "100.0"),
    ]
    labels = re.findall(r"<text [^>]*>([^<]+)</text>", html)
    assert labels == ["1 tie", "2 cup", "3 dog"]


def test_without_javascript_each_box_is_one_yes_no_radio_pair_and_missed_is_a_text_field(
    client_for, annotator_a, item
):
    html = _html(client_for(annotator_a).get(_label_url(item.study)))
    assert 'name="answer_boxes"' not in html  # no free-text box answer when there are boxes
    assert '<input type="hidden" name="answer_boxes_n" value="3">' in html
    for index in range(3):
        assert f'name="answer_boxes_{index}" value="yes"' in html
        assert f'name="answer_boxes_{index}" value="no"' in html
    assert _checked(html) == {}  # nothing preselected: a box is confirmed only when looked at
    assert '<input type="text" name="answer_missed"' in html
    assert 'list="class-names-missed" data-class-list' in html
    options = re.findall(r'<option value="([^"]+)"></option>', html)
    assert options == list(COCO_CLASS_NAMES)


def test_the_guidelines_name_the_box_keys(client_for, annotator_a, item):
    html = _html(client_for(annotator_a).get(_label_url(item.study)))
    assert "The highlighted box: Yes, it is there; on to the next box" in html
    assert "The highlighted box: No, a false detection; on to the next box" in html
    assert "Highlight the previous / next box" in html


def test_radio_answers_are_stored_as_one_value_per_box_in_box_order(client_for, annotator_a, item):
    client = client_for(annotator_a)
    client.get(_label_url(item.study))
    posted = {
        "answer_boxes_n": "3",
        "answer_boxes_2": "yes",
        "answer_boxes_0": "yes",
        "answer_boxes_1": "no",
        "answer_missed": "Sofa, cellphone",
    }
    response = client.post(_submit_url(item), posted)
    assert response.status_code == 302
    assert _stored(item, annotator_a) == {"boxes": "yes,no,yes", "missed": "couch,cell phone"}


def test_an_unanswered_box_re_shows_the_item_with_the_answers_given(client_for, annotator_a, item):
    client = client_for(annotator_a)
    client.get(_label_url(item.study))
    posted = {"answer_boxes_n": "3", "answer_boxes_0": "no", "answer_boxes_2": "yes", "answer_missed": "cup"}
    response = client.post(_submit_url(item), posted, **HTMX)
    assert response.status_code == 400
    html = _html(response)
    assert "Box 2 has no answer yet (1 of 3 unanswered): press Y or N for each box." in html
    assert _checked(html) == {"answer_boxes_0": "no", "answer_boxes_2": "yes"}
    assert 'name="answer_missed" value="cup"' in html
    assert not Label.objects.exists()


def test_an_unknown_missed_class_re_shows_the_item_with_a_suggestion(client_for, annotator_a, item):
    client = client_for(annotator_a)
    client.get(_label_url(item.study))
    posted = {f"answer_boxes_{i}": "yes" for i in range(3)} | {
        "answer_boxes_n": "3",
        "answer_missed": "umbrela",
    }
    response = client.post(_submit_url(item), posted, **HTMX)
    assert response.status_code == 400
    html = _html(response)
    assert "unknown object class &#x27;umbrela&#x27;; did you mean &#x27;umbrella&#x27;" in html
    assert _checked(html) == {f"answer_boxes_{i}": "yes" for i in range(3)}
    assert not Label.objects.exists()


def test_going_back_shows_the_stored_answer_of_each_box(client_for, annotator_a, item):
    client = client_for(annotator_a)
    client.get(_label_url(item.study))
    client.post(
        _submit_url(item),
        {
            "answer_boxes_n": "3",
            "answer_boxes_0": "yes",
            "answer_boxes_1": "no",
            "answer_boxes_2": "no",
            "answer_missed": "cup",
        },
    )
    html = _html(client.get(_label_url(item.study) + f"?item={item.pk}"))
    assert _checked(html) == {"answer_boxes_0": "yes", "answer_boxes_1": "no", "answer_boxes_2": "no"}
    assert 'name="answer_missed" value="cup"' in html


def test_an_image_without_detections_asks_only_for_missed_objects(client_for, annotator_a, study):
    empty = ItemFactory(prompt=PromptFactory(study=study), metadata={"boxes": []})
    client = client_for(annotator_a)
    html = _html(client.get(_label_url(study)))
    assert "The detector found no object in this image: nothing to confirm." in html
    assert '<input type="hidden" name="answer_boxes_n" value="0">' in html
    client.post(_submit_url(empty), {"answer_boxes_n": "0", "answer_missed": "handbag"})
    assert _stored(empty, annotator_a) == {"boxes": "", "missed": "handbag"}


def test_a_forged_box_count_is_refused(client_for, annotator_a, item):
    client = client_for(annotator_a)
    client.get(_label_url(item.study))
    response = client.post(_submit_url(item), {"answer_boxes_n": "999999", "answer_missed": ""})
    assert response.status_code == 400
    assert "impossible number of boxes" in _html(response)
    assert not Label.objects.exists()


def test_captions_of_boxes_close_together_are_placed_apart_on_the_image(client_for, annotator_a, study):
    # The demo's case: a cup on a dining table, a spoon beside it, each caption's natural place
    # (above its box) under another's. Placed at the phone's caption size, no two overlap.
    image = ImageFactory(width=600, height=240)
    boxes = [
        {"class": "cup", "confidence": 0.9, "box": [250.0, 30.0, 340.0, 130.0]},
        {"class": "person", "confidence": 0.9, "box": [30.0, 25.0, 210.0, 235.0]},
        {"class": "dining table", "confidence": 0.7, "box": [240.0, 10.0, 600.0, 240.0]},
        {"class": "spoon", "confidence": 0.6, "box": [330.0, 40.0, 380.0, 190.0]},
    ]
    item = ItemFactory(prompt=PromptFactory(study=study), image=image, metadata={"boxes": boxes})
    html = _html(client_for(annotator_a).get(_label_url(item.study)))
    font = int(re.search(r'class="box-overlay"[^>]*font-size="(\d+)"', html).group(1))
    scale = font * box_kinds.PHONE_CAPTION_SCALE
    rects = []
    for x, y, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)">([^<]+)</text>', html):
        x, y = float(x), float(y)
        right = x + len(text) * box_kinds.CAPTION_EM * scale
        top, bottom = y - box_kinds.CAPTION_ASCENT * scale, y + box_kinds.CAPTION_DESCENT * scale
        assert x >= 0, text
        assert right <= 600, text
        assert top >= 0, text
        assert bottom <= 240, text
        rects.append((x, top, right, bottom))
    assert len(rects) == 4
    for n, a in enumerate(rects):
        for b in rects[n + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
