"""Labeling a questions study through the HTTP screen: every question of the
image on one screen with one key per answer and Enter to submit, the blind N-annotator seats,
Back, and disputes per (item, question) settled by a researcher. The screen is the core's
multi-question screen; nothing of it belongs to the protocol."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotate.models import FinalLabel, Label
from studies.models import Question

pytestmark = pytest.mark.django_db


def _html(response) -> str:
    return response.content.decode()


def _shown_item_id(response) -> int:
    match = re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', _html(response))
    assert match, _html(response)
    return int(match.group(1))


def _label(client, study, item, answers):
    response = client.post(reverse("annotate:label_submit", args=[study.slug, item.pk]), answers)
    assert response.status_code == 302, _html(response)


def test_every_question_is_on_one_screen_with_a_key_per_answer(client_for, annotator_a, questions_study):
    study, _items = questions_study
    response = client_for(annotator_a).get(reverse("annotate:label_study", args=[study.slug]))
    html = _html(response)
    assert 'data-layout="multi"' in html
    assert "<kbd>Enter</kbd> Save answers" in html
    for question in Question.objects.filter(study=study):
        assert question.text in html
        for choice in question.choices:
            assert (
                f'name="answer_{question.key}" value="{choice["value"]}" data-key="{choice["key"]}"' in html
            )
    assert 'data-key="z"' in html  # Back


def test_two_annotators_label_blind_and_a_disagreement_is_a_dispute_of_that_question_only(
    client_for, annotator_a, annotator_b, researcher, questions_study
):
    study, items = questions_study
    anna, ben = client_for(annotator_a), client_for(annotator_b)
    label_url = reverse("annotate:label_study", args=[study.slug])
    first = items[0]
    assert _shown_item_id(anna.get(label_url)) == first.pk
    _label(anna, study, first, {"answer_age": "young", "answer_wealth": "rich"})
    # The second annotator does not see the first one's answers (blind seats).
    page = ben.get(label_url)
    assert _shown_item_id(page) == first.pk
    assert "checked" not in _html(page)
    _label(ben, study, first, {"answer_age": "old", "answer_wealth": "rich"})
    finals = {
        f.question.key: f.value for f in FinalLabel.objects.filter(item=first).select_related("question")
    }
    assert finals == {"wealth": "rich"}  # age is disputed, wealth agreed
    # A third annotator's seat does not exist: both seats of the item are taken.
    assert Label.objects.filter(item=first).count() == 4

    # The researcher sees the (item, age) dispute and settles it.
    disputes = client_for(researcher).get(reverse("annotate:disputes", args=[study.slug]))
    assert reverse("annotate:dispute_question", args=[first.pk, "age"]) in _html(disputes)
    assert reverse("annotate:dispute_question", args=[first.pk, "wealth"]) not in _html(disputes)
    response = client_for(researcher).post(
        reverse("annotate:dispute_question", args=[first.pk, "age"]), {"question": "age", "value": "middle"}
    )
    assert response.status_code in (200, 302)
    assert FinalLabel.objects.get(item=first, question__key="age").value == "middle"


def test_back_shows_the_previous_image_with_its_answers_to_change(client_for, annotator_a, questions_study):
    study, items = questions_study
    client = client_for(annotator_a)
    client.get(reverse("annotate:label_study", args=[study.slug]))
    _label(client, study, items[0], {"answer_age": "young", "answer_wealth": "poor"})
    nxt = client.get(reverse("annotate:label_study", args=[study.slug]))
    assert _shown_item_id(nxt) == items[1].pk
    back = client.get(
        reverse("annotate:label_undo", args=[study.slug]) + f"?before={items[1].pk}", follow=True
    )
    html = _html(back)
    assert _shown_item_id(back) == items[0].pk
    assert re.search(r'name="answer_age" value="young"[^>]*checked', html)
    hidden = dict(re.findall(r'type="hidden" name="([a-z_]+)" value="([^"]*)"', html))
    assert hidden.get("change") == "1"
    response = client.post(
        reverse("annotate:label_submit", args=[study.slug, items[0].pk]),
        hidden | {"answer_age": "old", "answer_wealth": "poor"},
    )
    assert response.status_code == 302
    assert Label.objects.get(item=items[0], annotator=annotator_a, question__key="age").value == "old"


def test_an_answer_outside_the_question_is_refused(client_for, annotator_a, questions_study):
    study, items = questions_study
    client = client_for(annotator_a)
    client.get(reverse("annotate:label_study", args=[study.slug]))
    response = client.post(
        reverse("annotate:label_submit", args=[study.slug, items[0].pk]),
        {"answer_age": "ancient", "answer_wealth": "poor"},
    )
    assert response.status_code in (200, 400)
    assert not Label.objects.filter(item=items[0]).exists()


def test_the_dispute_page_shows_the_compared_column_and_its_value(
    client_for, annotator_a, annotator_b, researcher, questions_study
):
    study, items = questions_study
    first = items[0]  # skin: light
    _label(client_for(annotator_a), study, first, {"answer_age": "young", "answer_wealth": "rich"})
    _label(client_for(annotator_b), study, first, {"answer_age": "old", "answer_wealth": "rich"})
    page = _html(client_for(researcher).get(reverse("annotate:dispute_question", args=[first.pk, "age"])))
    assert '<dt>Compared: skin</dt><dd class="compared">light</dd>' in page
    # A column the import keeps in the item's own fields: the T2I model.
    study.parameters = {"compare": "t2i_model"}
    study.save(update_fields=["parameters"])
    page = _html(client_for(researcher).get(reverse("annotate:dispute_question", args=[first.pk, "age"])))
    assert '<dt>Compared: t2i_model</dt><dd class="compared">sdxl</dd>' in page
