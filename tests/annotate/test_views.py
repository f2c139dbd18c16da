"""The HTML screens: labeling with and without JavaScript (one question, a pair, fifteen toggles,
text answers), going back and stale forms, disputes per question, items, agreement."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.urls import reverse

from annotate import services
from annotate.models import FinalLabel, Label, LabelRevision
from studies.models import Question
from tests.annotate.gender import final_set, submit
from tests.factories import ItemFactory, PairItemFactory, PromptFactory, StudyFactory, question_of

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def items(study):
    prompt = PromptFactory(study=study, category="profession", word="lawyer")
    return [ItemFactory(prompt=prompt) for _ in range(3)]


def _html(response) -> str:
    return response.content.decode()


def _text(response) -> str:
    """The page's visible text: tags (and their attributes) removed, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", _html(response)))


def _shown_item_id(response) -> int:
    match = re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', _html(response))
    assert match, _html(response)
    return int(match.group(1))


def _request_id(response) -> str:
    return re.search(r'name="request_id" value="([0-9a-f]+)"', _html(response)).group(1)


def _hidden(response, name: str) -> str | None:
    match = re.search(rf'name="{name}" value="([^"]*)"', _html(response))
    return match.group(1) if match else None


def _submit_url(item) -> str:
    return reverse("annotate:label_submit", args=[item.study.slug, item.pk])


def _label_url(study) -> str:
    return reverse("annotate:label_study", args=[study.slug])


def _undo_url(study, before=None) -> str:
    url = reverse("annotate:label_undo", args=[study.slug])
    return f"{url}?before={before.pk}" if before is not None else url


def _gender(value: str, **extra: str) -> dict[str, str]:
    return {"answer_gender": value, **extra}


def _own(item, annotator) -> Label:
    return Label.objects.get(item=item, annotator=annotator)


# --- labeling: one question (the gender study) ------------------------------------------------


def test_annotator_with_one_study_goes_straight_to_labeling(client_for, annotator_a, study):
    response = client_for(annotator_a).get(reverse("annotate:label"))
    assert response.status_code == 302
    assert response["Location"] == _label_url(study)


def test_annotator_with_several_studies_picks_one_by_name(client_for, annotator_a, study):
    other = StudyFactory(name="Attributes", slug="attributes", protocol="attributes")
    other.annotators.add(annotator_a)
    response = client_for(annotator_a).get(reverse("annotate:label"))
    assert response.status_code == 200
    assert _label_url(study) in _html(response)
    assert _label_url(other) in _html(response)


def test_label_screen_shows_first_item_counter_keys_and_preloads_the_next(client_for, annotator_a, items):
    response = client_for(annotator_a).get(_label_url(items[0].study))
    html = _html(response)
    assert response.status_code == 200
    assert _shown_item_id(response) == items[0].pk
    next_url = items[1].item_images.get().image.url
    assert f'<link rel="preload" as="image" href="{next_url}">' in html
    assert "<strong>0</strong> done" in html
    assert "<strong>3</strong> remaining" in html
    for key in "MFLOZ":
        assert f"<kbd>{key}</kbd>" in html
    assert 'method="post"' in html  # works without JavaScript
    assert 'data-layout="single"' in html
    assert "annotate/keys.js" in html
    assert f'hx-post="{_submit_url(items[0])}"' in html  # htmx posts it and swaps the next item in


def test_prompt_is_hidden_unless_the_study_shows_it(client_for, annotator_a, items):
    study = items[0].study
    client = client_for(annotator_a)
    assert items[0].prompt.text not in _html(client.get(_label_url(study)))
    study.show_prompt = True
    study.save()
    assert items[0].prompt.text in _html(client.get(_label_url(study)))


def test_plain_form_post_saves_label_and_redirects_to_the_next_item(client_for, annotator_a, items):
    client = client_for(annotator_a)
    first = client.get(_label_url(items[0].study))
    response = client.post(
        _submit_url(items[0]), _gender("male", request_id=_request_id(first), shown_at="1")
    )
    assert response.status_code == 302
    assert response["Location"] == _label_url(items[0].study)
    label = _own(items[0], annotator_a)
    assert label.value == "male"
    assert label.duration_ms is not None  # server fallback, capped at an hour
    nxt = client.get(response["Location"])
    assert _shown_item_id(nxt) == items[1].pk
    assert "<strong>1</strong> done" in _html(nxt)


def test_the_old_value_field_still_answers_a_single_question_screen(client_for, annotator_a, items):
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    client.post(_submit_url(items[0]), {"value": "other", "reason": "a statue"})
    label = _own(items[0], annotator_a)
    assert (label.value, label.reason) == ("other", "a statue")


def test_htmx_submit_returns_only_the_next_item_partial_with_client_duration(client_for, annotator_a, items):
    client = client_for(annotator_a)
    first = client.get(_label_url(items[0].study))
    response = client.post(
        _submit_url(items[0]), _gender("female", request_id=_request_id(first), duration_ms="1234"), **HTMX
    )
    html = _html(response)
    assert response.status_code == 200
    assert "<html" not in html
    assert html.lstrip().startswith('<section id="label-region"')
    assert _shown_item_id(response) == items[1].pk
    assert _own(items[0], annotator_a).duration_ms == 1234


def test_double_submit_with_the_same_request_id_is_stored_once(client_for, annotator_a, items):
    client = client_for(annotator_a)
    rid = _request_id(client.get(_label_url(items[0].study)))
    for _ in range(2):
        client.post(_submit_url(items[0]), _gender("male", request_id=rid), **HTMX)
    assert Label.objects.filter(item=items[0]).count() == 1
    assert LabelRevision.objects.filter(label__item=items[0]).count() == 1


def test_a_key_press_after_the_session_ended_sends_the_browser_to_log_in_and_back(client, items):
    """htmx follows ``HX-Redirect``; after the login the annotator is back on the labeling screen
    (the page the request came from, not the submit URL). A plain form post is redirected."""
    screen = _label_url(items[0].study)
    key_press = client.post(
        _submit_url(items[0]), _gender("male"), **HTMX, HTTP_HX_CURRENT_URL=f"http://testserver{screen}"
    )
    assert key_press.status_code == 200
    assert key_press["HX-Redirect"] == f"{reverse('login')}?next={screen}"
    plain = client.post(_submit_url(items[0]), _gender("male"))
    assert plain.status_code == 302
    assert plain["Location"] == f"{reverse('login')}?next={_submit_url(items[0])}"
    assert not Label.objects.exists()


def test_other_without_reason_keeps_the_annotator_on_the_same_item(client_for, annotator_a, items):
    client = client_for(annotator_a)
    rid = _request_id(client.get(_label_url(items[0].study)))
    response = client.post(_submit_url(items[0]), _gender("other", request_id=rid), **HTMX)
    assert response.status_code == 400
    assert 'role="alert"' in _html(response)
    assert "reason" in _html(response).lower()
    assert _shown_item_id(response) == items[0].pk
    assert _request_id(response) == rid  # the corrected submit is still the same submit
    assert not Label.objects.filter(item=items[0]).exists()


def test_unknown_answer_gets_a_clear_error_and_no_row(client_for, annotator_a, items):
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    response = client.post(_submit_url(items[0]), _gender("cat"))
    assert response.status_code == 400
    assert "cat" in _html(response)
    assert not Label.objects.exists()


def test_missing_answer_is_refused_without_losing_place(client_for, annotator_a, items):
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    response = client.post(_submit_url(items[0]), {"reason_gender": "x"})
    assert response.status_code == 400
    assert "Choose an answer." in _html(response)
    assert _shown_item_id(response) == items[0].pk


def test_html_in_a_reason_is_escaped_on_every_screen(client_for, annotator_a, annotator_b, researcher, items):
    evil = '<script>alert("x")</script>'
    a, b = client_for(annotator_a), client_for(annotator_b)
    a.get(_label_url(items[0].study))
    b.get(_label_url(items[0].study))
    a.post(_submit_url(items[0]), _gender("other", reason_gender=evil))
    b.post(_submit_url(items[0]), _gender("male"))
    # The annotator's own screen after going back, the dispute list and page, the item page.
    pages = [
        a.get(_label_url(items[0].study) + f"?item={items[0].pk}"),
        client_for(researcher).get(reverse("annotate:disputes")),
        client_for(researcher).get(reverse("annotate:dispute", args=[items[0].pk])),
        client_for(researcher).get(reverse("annotate:image", args=[items[0].pk])),
    ]
    for page in pages:
        assert evil not in _html(page)
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in _html(page)


def test_stale_form_after_resolution_says_so_and_shows_the_next_item(
    client_for, annotator_a, researcher, items
):
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    final_set(item=items[0], value="female", decided_by=researcher)
    response = client.post(_submit_url(items[0]), _gender("male"), **HTMX)
    assert "already resolved" in _html(response)
    assert _shown_item_id(response) != items[0].pk
    plain = client.post(_submit_url(items[0]), _gender("male"), follow=True)
    assert "already resolved" in _html(plain)
    assert not Label.objects.filter(item=items[0]).exists()


def test_undo_shows_the_previous_item_as_a_change_form_and_the_change_is_kept(client_for, annotator_a, items):
    client = client_for(annotator_a)
    study = items[0].study
    client.get(_label_url(study))
    client.post(_submit_url(items[0]), _gender("male"))
    current = client.get(_label_url(study))
    assert _shown_item_id(current) == items[1].pk
    undo = client.get(_undo_url(study, items[1]))
    assert undo.status_code == 302
    back = client.get(undo["Location"])
    assert _shown_item_id(back) == items[0].pk
    assert "Your label: " in _text(back)
    assert "Male" in _text(back)
    assert _hidden(back, "change") == "1"
    stamp = services.label_revision_stamp(item=items[0], annotator=annotator_a)
    assert _hidden(back, "seen_revision") == str(stamp)
    client.post(
        _submit_url(items[0]), _gender("female", change="1", seen_revision=_hidden(back, "seen_revision"))
    )
    assert _own(items[0], annotator_a).value == "female"
    assert LabelRevision.objects.filter(label__item=items[0]).count() == 2
    assert _shown_item_id(client.get(_label_url(study))) == items[1].pk


def test_undo_over_htmx_returns_the_previous_item_partial_with_the_change_fields(
    client_for, annotator_a, items
):
    client = client_for(annotator_a)
    study = items[0].study
    client.get(_label_url(study))
    client.post(_submit_url(items[0]), _gender("male"))
    response = client.get(_undo_url(study, items[1]), **HTMX)
    assert response.status_code == 200
    assert _shown_item_id(response) == items[0].pk
    assert _hidden(response, "change") == "1"


def test_undo_with_nothing_to_undo_says_so(client_for, annotator_a, items):
    study = items[0].study
    response = client_for(annotator_a).get(_undo_url(study), follow=True)
    assert "no earlier label" in _html(response)


def test_other_then_back_then_female_stores_female_without_the_old_reason(
    client_for, annotator_a, annotator_b, researcher, items
):
    """Regression: O, a reason, Enter, Z, F stored "female" with the reason typed for "other",
    and Disputes showed "Female (cartoon, not a photo)". The change form still carries the
    reason field, filled in; the server must not keep it for an answer that asks for none."""
    study = items[0].study
    client = client_for(annotator_a)
    first = client.get(_label_url(study))
    client.post(
        _submit_url(items[0]),
        _gender("other", reason_gender="cartoon, not a photo", request_id=_request_id(first)),
        **HTMX,
    )
    back = client.get(_undo_url(study, items[1]), **HTMX)
    assert _shown_item_id(back) == items[0].pk
    assert 'value="cartoon, not a photo"' in _html(back)  # the reason field, as the form posts it
    response = client.post(
        _submit_url(items[0]),
        _gender(
            "female",
            reason_gender="cartoon, not a photo",
            change="1",
            seen_revision=_hidden(back, "seen_revision"),
            request_id=_request_id(back),
        ),
        **HTMX,
    )
    assert response.status_code == 200
    label = _own(items[0], annotator_a)
    assert (label.value, label.reason) == ("female", "")
    services.assignment_queue(study=study, annotator=annotator_b, size=1)
    submit(item=items[0], annotator=annotator_b, value="male")
    disputes = _text(client_for(researcher).get(reverse("annotate:disputes", args=[study.slug])))
    assert "Female" in disputes
    assert "cartoon" not in disputes


def test_a_page_restored_by_back_reposting_its_request_id_with_another_answer_says_reload(
    client_for, annotator_a, items
):
    """Regression: the same request id with a different answer got 200 and the next item while
    the new answer was dropped without a word. The same answer again stays a harmless repeat."""
    client = client_for(annotator_a)
    first = client.get(_label_url(items[0].study))
    rid = _request_id(first)
    assert client.post(_submit_url(items[0]), _gender("male", request_id=rid), **HTMX).status_code == 200
    for extra in ({}, HTMX):
        response = client.post(_submit_url(items[0]), _gender("female", request_id=rid), **extra)
        assert response.status_code == 409
        assert "already labelled — reload" in _text(response)
    repeat = client.post(_submit_url(items[0]), _gender("male", request_id=rid), **HTMX)
    assert repeat.status_code == 200
    assert _shown_item_id(repeat) == items[1].pk
    assert _own(items[0], annotator_a).value == "male"
    assert LabelRevision.objects.filter(label__item=items[0]).count() == 1


def test_the_item_history_names_a_removed_agreed_answer(
    client_for, annotator_a, annotator_b, researcher, items
):
    study = items[0].study
    for annotator in (annotator_a, annotator_b):
        services.assignment_queue(study=study, annotator=annotator, size=1)
        submit(item=items[0], annotator=annotator, value="male")
    submit(item=items[0], annotator=annotator_a, value="female", change=True)
    page = _text(client_for(researcher).get(reverse("annotate:image", args=[items[0].pk])))
    assert "final answer (agreed)" in page
    assert "agreed final answer removed" in page
    assert "Agreement broken: anna changed their label." in page


def test_a_plain_resubmit_of_a_labelled_item_changes_nothing_and_says_reload(client_for, annotator_a, items):
    # The Back button brings back the form of an item already labelled: without the explicit
    # change fields its submit is stale, with or without JavaScript.
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    client.post(_submit_url(items[0]), _gender("male"))
    for extra in ({}, HTMX):
        response = client.post(_submit_url(items[0]), _gender("female"), **extra)
        assert response.status_code == 409
        assert "already labelled" in _text(response)
        assert "reload" in _text(response).lower()
        assert "no-store" in response["Cache-Control"]
    label = _own(items[0], annotator_a)
    assert label.value == "male"
    assert label.revisions.count() == 1


def test_a_change_from_a_form_drawn_before_another_change_is_refused(client_for, annotator_a, items):
    client = client_for(annotator_a)
    study = items[0].study
    client.get(_label_url(study))
    client.post(_submit_url(items[0]), _gender("male"))
    first = client.get(_label_url(study) + f"?item={items[0].pk}")
    second = client.get(_label_url(study) + f"?item={items[0].pk}")
    client.post(
        _submit_url(items[0]), _gender("female", change="1", seen_revision=_hidden(first, "seen_revision"))
    )
    response = client.post(
        _submit_url(items[0]),
        _gender("low_quality", change="1", seen_revision=_hidden(second, "seen_revision")),
    )
    assert response.status_code == 409
    assert "changed since this page was drawn" in _text(response)
    assert _own(items[0], annotator_a).value == "female"


def test_every_labeling_response_forbids_caching(client_for, annotator_a, items):
    client = client_for(annotator_a)
    study = items[0].study
    responses = [
        client.get(reverse("annotate:label")),
        client.get(_label_url(study)),
        client.get(_label_url(study), **HTMX),
        client.post(_submit_url(items[0]), _gender("male")),
        client.post(_submit_url(items[1]), _gender("cat"), **HTMX),
        client.get(_undo_url(study, items[1])),
        client.get(_undo_url(study, items[1]), **HTMX),
    ]
    client.get(_label_url(study))
    responses.append(client.post(_submit_url(items[1]), _gender("male"), **HTMX))
    for response in responses:
        assert "no-store" in response["Cache-Control"], response


def test_annotator_never_sees_anyone_elses_label(client_for, annotator_a, annotator_b, items):
    a, b = client_for(annotator_a), client_for(annotator_b)
    a.get(_label_url(items[0].study))
    a.post(_submit_url(items[0]), _gender("other", reason_gender="a distinctive reason"))
    response = b.get(_label_url(items[0].study))
    assert _shown_item_id(response) == items[0].pk
    assert "a distinctive reason" not in _html(response)
    assert "Your label:" not in _html(response)
    # Nor by asking for the item as a revisit: B has no answer on it, so B gets their queue.
    revisit = b.get(_label_url(items[0].study) + f"?item={items[0].pk}")
    assert "a distinctive reason" not in _html(revisit)
    assert _hidden(revisit, "change") is None


def test_when_no_work_is_left_the_screen_says_so(client_for, annotator_a, study):
    response = client_for(annotator_a).get(_label_url(study))
    assert "No items left for you" in _html(response)


def test_choices_keys_and_texts_come_from_the_question_rows(client_for, annotator_a, study):
    Question.objects.filter(study=study, key="gender").update(
        text="Is there a person?",
        choices=[
            {"value": "yes", "name": "Somebody", "key": "y"},
            {"value": "no", "name": "Nobody", "key": "n"},
        ],
    )
    item = ItemFactory(prompt=PromptFactory(study=study))
    client = client_for(annotator_a)
    html = _html(client.get(_label_url(study)))
    assert "Is there a person?" in html
    assert 'data-key="y"' in html
    assert "Somebody" in html
    assert 'data-key="m"' not in html
    client.post(_submit_url(item), _gender("yes"))
    assert Label.objects.get(item=item).value == "yes"


def test_guidelines_are_shown_open_on_the_first_visit_with_the_keys(client_for, annotator_a, items):
    study = items[0].study
    study.description = "Label the <b>apparent</b> gender."
    study.save()
    client = client_for(annotator_a)
    first = _html(client.get(_label_url(study)))
    assert '<details id="guidelines" class="guidelines" open>' in first
    assert "Label the &lt;b&gt;apparent&lt;/b&gt; gender." in first
    keys = re.search(r'<details id="guidelines".*?</details>', first, re.S).group(0)
    for key, name in (("M", "Male"), ("F", "Female"), ("L", "Low quality"), ("O", "Other"), ("Z", "Go back")):
        assert f"<kbd>{key}</kbd>" in keys
        assert name in keys
    second = _html(client.get(_label_url(study)))
    assert '<details id="guidelines" class="guidelines">' in second
    assert "Label the &lt;b&gt;apparent&lt;/b&gt; gender." in second


# --- labeling: a pair, side by side, three questions -------------------------------------------


@pytest.fixture
def pair_study(annotator_a, annotator_b):
    study = StudyFactory(name="Pairs", slug="pairs", protocol="pair_change")
    study.annotators.add(annotator_a, annotator_b)
    prompt = PromptFactory(study=study, category="profession", word="nurse")
    return study, [PairItemFactory(prompt=prompt) for _ in range(2)]


def test_a_pair_is_shown_side_by_side_seed_left_edit_right_with_all_its_questions(
    client_for, annotator_a, pair_study
):
    study, pairs = pair_study
    response = client_for(annotator_a).get(_label_url(study))
    html = _html(response)
    assert _shown_item_id(response) == pairs[0].pk
    seed = pairs[0].item_images.get(role="input").image.url
    edit = pairs[0].item_images.get(role="output").image.url
    assert html.index(seed) < html.index(edit)  # seed first (left), edit second (right)
    assert 'class="label-pair"' in html
    assert "Seed photo" in html
    assert "Edited image" in html
    assert 'data-layout="multi"' in html
    for question in Question.objects.filter(study=study):
        assert question.text in html
        for choice in question.choices:
            assert f'name="answer_{question.key}" value="{choice["value"]}"' in html
    assert "<kbd>Enter</kbd>" in html
    # The next pair's two images are preloaded.
    for link in pairs[1].item_images.all():
        assert f'<link rel="preload" as="image" href="{link.image.url}">' in html


def test_a_pair_is_answered_in_one_submit_without_javascript(client_for, annotator_a, pair_study):
    study, pairs = pair_study
    client = client_for(annotator_a)
    client.get(_label_url(study))
    answers = {"answer_age": "older", "answer_gender": "female_female", "answer_skin": "same"}
    response = client.post(_submit_url(pairs[0]), answers)
    assert response.status_code == 302
    stored = {
        label.question.key: label.value
        for label in Label.objects.filter(item=pairs[0], annotator=annotator_a).select_related("question")
    }
    assert stored == {"age": "older", "gender": "female_female", "skin": "same"}
    assert _shown_item_id(client.get(_label_url(study))) == pairs[1].pk


def test_a_pair_with_an_unanswered_question_keeps_the_given_answers_and_names_the_missing_one(
    client_for, annotator_a, pair_study
):
    study, pairs = pair_study
    client = client_for(annotator_a)
    client.get(_label_url(study))
    response = client.post(
        _submit_url(pairs[0]), {"answer_age": "younger", "answer_gender": "male_male"}, **HTMX
    )
    assert response.status_code == 400
    assert "skin" in _text(response)
    assert re.search(r'value="younger" checked', _html(response))
    assert re.search(r'value="male_male" checked', _html(response))
    assert not Label.objects.exists()


def test_going_back_to_a_pair_shows_every_answer_of_the_annotator(client_for, annotator_a, pair_study):
    study, pairs = pair_study
    client = client_for(annotator_a)
    client.get(_label_url(study))
    client.post(
        _submit_url(pairs[0]),
        {"answer_age": "older", "answer_gender": "female_male", "answer_skin": "darker"},
    )
    back = client.get(client.get(_undo_url(study, pairs[1]))["Location"])
    html = _html(back)
    for value in ("older", "female_male", "darker"):
        assert re.search(rf'value="{value}" checked', html)
    assert _hidden(back, "change") == "1"


# --- labeling: fifteen toggles, one question, text answers ---------------------------------------


@pytest.fixture
def attribute_study(annotator_a, annotator_b, annotator_c):
    study = StudyFactory(name="Attributes", slug="attrs", protocol="attributes")
    study.annotators.add(annotator_a, annotator_b, annotator_c)
    prompt = PromptFactory(study=study, category="profession", word="doctor")
    neutral = ItemFactory(prompt=prompt, key="neutral/doctor_0.png")
    explicit = ItemFactory(prompt=prompt, key="explicit/doctor_boots.png", question_keys=["boots"])
    return study, neutral, explicit


def test_a_neutral_attribute_item_shows_its_fifteen_toggles_with_keys_and_defaults(
    client_for, annotator_a, attribute_study
):
    study, _neutral, _explicit = attribute_study
    html = _html(client_for(annotator_a).get(_label_url(study)))
    questions = list(Question.objects.filter(study=study))
    assert len(questions) == 15
    assert html.count('class="question kind-toggle"') == 15
    for question in questions:
        assert f'data-toggle-key="{question.hotkey}"' in html
        assert f"<kbd>{question.hotkey.upper()}</kbd> {question.text}" in html
        assert re.search(rf'name="answer_{question.key}" value="{question.default_value}" checked', html)
    assert "<kbd>Enter</kbd>" in html


def test_toggles_left_at_their_default_are_stored_as_the_default(client_for, annotator_a, attribute_study):
    study, neutral, explicit = attribute_study
    client = client_for(annotator_a)
    client.get(_label_url(study))
    answers = {f"answer_{q.key}": "no" for q in Question.objects.filter(study=study)}
    answers.update(answer_boots="yes", answer_hat="yes")
    client.post(_submit_url(neutral), answers)
    stored = dict(
        Label.objects.filter(item=neutral, annotator=annotator_a).values_list("question__key", "value")
    )
    assert len(stored) == 15
    assert {key for key, value in stored.items() if value == "yes"} == {"boots", "hat"}
    # The explicit item asks one question only.
    html = _html(client.get(_label_url(study)))
    assert _shown_item_id(client.get(_label_url(study))) == explicit.pk
    assert html.count('class="question kind-toggle"') == 1
    assert 'name="answer_boots"' in html
    assert 'name="answer_hat"' not in html


def test_box_and_class_questions_are_answered_as_comma_separated_text(client_for, annotator_a):
    study = StudyFactory(name="Objects", slug="objects", protocol="objects")
    study.annotators.add(annotator_a)
    item = ItemFactory(prompt=PromptFactory(study=study))
    client = client_for(annotator_a)
    html = _html(client.get(_label_url(study)))
    assert '<input type="text" name="answer_boxes"' in html
    assert '<input type="text" name="answer_missed"' in html
    client.post(_submit_url(item), {"answer_boxes": "yes, no", "answer_missed": "cup, dog"})
    stored = dict(Label.objects.filter(item=item).values_list("question__key", "value"))
    assert stored == {"boxes": "yes,no", "missed": "cup,dog"}


# --- disputes -------------------------------------------------------------------------------------


@pytest.fixture
def disputed(client_for, annotator_a, annotator_b, items):
    a, b = client_for(annotator_a), client_for(annotator_b)
    for client in (a, b):
        client.get(_label_url(items[0].study))
    a.post(_submit_url(items[0]), _gender("male"))
    b.post(_submit_url(items[0]), _gender("female"))
    a.post(_submit_url(items[1]), _gender("other", reason_gender="a mannequin"))
    b.post(_submit_url(items[1]), _gender("low_quality"))
    return items[:2]


def test_dispute_queue_lists_each_disputed_answer_with_its_labels_in_display_names(
    client_for, researcher, disputed
):
    response = client_for(researcher).get(reverse("annotate:disputes"))
    text = _text(response)
    assert response.status_code == 200
    assert disputed[0].key in text
    assert disputed[1].key in text
    for shown in ("anna : Male", "ben : Female", "anna : Other (a mannequin)", "ben : Low quality", "2 of 2"):
        assert shown in text
    assert "low_quality" not in text  # display names, never raw values


def test_dispute_shows_both_labels_with_names_reasons_and_prompt(client_for, researcher, disputed):
    response = client_for(researcher).get(reverse("annotate:dispute", args=[disputed[1].pk]))
    html = _html(response)
    for text in ("anna", "ben", "a mannequin", disputed[1].prompt.text, 'data-key="u"', "<kbd>M</kbd>"):
        assert text in html
    assert "Cannot agree → Low quality" in _text(response)
    assert "low_quality" not in _text(response)


def test_resolving_a_dispute_records_who_and_moves_to_the_next(client_for, researcher, disputed):
    client = client_for(researcher)
    response = client.post(
        reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female", "note": "long hair"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("annotate:dispute_question", args=[disputed[1].pk, "gender"])
    final = FinalLabel.objects.get(item=disputed[0])
    assert (final.value, final.source, final.decided_by, final.note) == (
        "female",
        "resolved",
        researcher,
        "long hair",
    )


def test_cannot_agree_key_sets_the_questions_unresolvable_answer(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "male"})
    response = client.post(reverse("annotate:dispute", args=[disputed[1].pk]), {"unresolvable": "1"})
    assert response["Location"] == reverse("annotate:disputes", args=[disputed[1].study.slug])
    assert FinalLabel.objects.get(item=disputed[1]).value == "low_quality"


def test_resolving_with_neither_answer_nor_cannot_agree_is_refused(client_for, researcher, disputed):
    response = client_for(researcher).post(reverse("annotate:dispute", args=[disputed[0].pk]), {"note": "hm"})
    assert response.status_code == 400
    assert "Choose a final answer" in _html(response)
    assert not FinalLabel.objects.filter(item=disputed[0]).exists()


def test_resolving_with_an_unknown_answer_is_refused(client_for, researcher, disputed):
    response = client_for(researcher).post(
        reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "cat"}
    )
    assert response.status_code == 400
    assert not FinalLabel.objects.filter(item=disputed[0]).exists()


def test_a_pair_disputed_on_two_questions_is_two_disputes_resolved_one_at_a_time(
    client_for, researcher, annotator_a, annotator_b, pair_study
):
    study, pairs = pair_study
    for annotator, age, skin in ((annotator_a, "older", "darker"), (annotator_b, "younger", "lighter")):
        seat = services.assignment_queue(study=study, annotator=annotator, size=1)[0]
        services.annotation_submit(
            item=seat.item, annotator=annotator, answers={"age": age, "gender": "male_male", "skin": skin}
        )
    client = client_for(researcher)
    listing = _text(client.get(reverse("annotate:disputes", args=[study.slug])))
    assert "2 answers whose labels do not settle them" in listing
    assert "anna : Older" in listing
    assert "ben : Lighter" in listing
    page = client.get(reverse("annotate:dispute_question", args=[pairs[0].pk, "skin"]))
    assert "Compared with the seed photo, is the skin tone" in _text(page)
    assert "Seed photo" in _text(page)
    assert 'data-key="d"' in _html(page)
    assert 'data-key="u"' not in _html(page)  # the pair questions have no "cannot agree" answer
    response = client.post(
        reverse("annotate:dispute_question", args=[pairs[0].pk, "skin"]), {"value": "darker"}
    )
    assert response["Location"] == reverse("annotate:dispute_question", args=[pairs[0].pk, "age"])
    finals = dict(FinalLabel.objects.filter(item=pairs[0]).values_list("question__key", "value"))
    assert finals == {"gender": "male_male", "skin": "darker"}


# --- items, history, agreement, stats -----------------------------------------------------------


def test_items_list_filters_by_state_and_shows_every_state(client_for, researcher, disputed, items):
    client = client_for(researcher)
    text = _text(client.get(reverse("annotate:images")))
    assert "Disputed" in text
    assert "Unlabelled" in text
    filtered = _text(client.get(reverse("annotate:images"), {"state": "unlabelled"}))
    assert items[2].key in filtered
    assert disputed[0].key not in filtered


def test_items_list_filters_by_model_and_category_and_paginates(client_for, researcher, study):
    other = PromptFactory(study=study, category="trait", word="kind")
    for _ in range(51):
        ItemFactory(prompt=other, t2i_model="dalle3")
    ItemFactory(prompt=PromptFactory(study=study, category="profession"), t2i_model="sdxl")
    client = client_for(researcher)
    response = client.get(reverse("annotate:images"), {"t2i_model": "dalle3", "category": "trait"})
    assert response.context["page"].paginator.count == 51
    assert "page 1 of 2" in _html(response)
    page2 = client.get(reverse("annotate:images"), {"t2i_model": "dalle3", "category": "trait", "page": 2})
    assert len(page2.context["page"].object_list) == 1


def test_the_filter_menus_offer_only_categories_that_have_images(client_for, researcher, study):
    ItemFactory(prompt=PromptFactory(study=study, category="profession"), t2i_model="sdxl")
    PromptFactory(study=study, category="trait")  # a prompt with no image yet
    client = client_for(researcher)
    for page in ("annotate:images", "annotate:agreement"):
        offered = dict(client.get(reverse(page)).context["form"].fields["category"].choices)
        assert "profession" in offered
        assert "trait" not in offered, page


def test_items_list_searches_key_and_prompt_sorts_and_takes_the_study_as_a_parameter(
    client_for, researcher, study
):
    StudyFactory(name="Other", slug="other")
    a = ItemFactory(prompt=PromptFactory(study=study, text="a photo of a firefighter"), key="b/zeta.png")
    b = ItemFactory(prompt=PromptFactory(study=study, text="a photo of a nurse"), key="a/alpha.png")
    client = client_for(researcher)
    url = reverse("annotate:images")
    found = client.get(url, {"study": study.slug, "q": "firefight"})
    assert [item.pk for item in found.context["page"]] == [a.pk]
    assert [item.pk for item in client.get(url, {"study": study.slug, "q": "ALPHA"}).context["page"]] == [
        b.pk
    ]
    by_key = client.get(url, {"study": study.slug, "sort": "key"})
    assert [item.pk for item in by_key.context["page"]] == [b.pk, a.pk]
    newest = client.get(url, {"study": study.slug, "sort": "-id"})
    assert [item.pk for item in newest.context["page"]] == [b.pk, a.pk]


def test_item_page_shows_labels_final_answer_and_history_in_time_order(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female", "note": "n1"})
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "male", "note": "n2"})
    response = client.get(reverse("annotate:image", args=[disputed[0].pk]))
    text = _text(response)
    for shown in ("anna", "ben", "rita", "n1", "n2", "resolved", "History", "Resolved"):
        assert shown in text
    history = re.search(r"<table class=\"data history\">.*?</table>", _html(response), re.S).group(0)
    rows = re.findall(r"<tr><td>([\d\-: ]+)</td>", history)
    assert len(rows) == 4  # two labels, two decisions
    assert rows == sorted(rows)
    assert history.index("label of anna") < history.index("n1") < history.index("n2")


def test_a_pair_items_page_shows_both_images_by_role(client_for, researcher, pair_study):
    _study, pairs = pair_study
    html = _html(client_for(researcher).get(reverse("annotate:image", args=[pairs[0].pk])))
    for link in pairs[0].item_images.all():
        assert link.image.url in html
        assert link.source_path in html
    assert "Seed photo" in html
    assert "Edited image" in html


def test_annotator_stats_show_labels_done_per_annotator(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female"})
    response = client.get(reverse("annotate:annotator_stats"))
    html = re.sub(r"\s+", " ", _html(response))
    assert response.status_code == 200
    # Anna said male, Ben female; the final answer is female. Each labelled two items.
    assert "<tr><td>anna</td><td>2</td>" in html
    assert '<td>0 % <span class="muted">of 1</span></td>' in html
    assert '<td>100 % <span class="muted">of 1</span></td>' in html
    # The page says what the agreement is computed over.
    assert (
        "over every answer that has one — agreed by the annotators, resolved by a researcher or imported"
        in html
    )


def test_researcher_with_several_studies_picks_one(client_for, researcher, study):
    StudyFactory(name="Second", slug="second")
    response = client_for(researcher).get(reverse("annotate:disputes"))
    assert response.status_code == 200
    assert reverse("annotate:disputes", args=["second"]) in _html(response)


def test_no_role_page_explains_what_to_ask_for(client_for, outsider):
    response = client_for(outsider).get(reverse("annotate:no_role"))
    assert response.status_code == 200
    assert "neither an annotator nor a researcher" in _html(response)


def test_agreement_page_shows_kappa_confusion_and_facets_equal_to_sklearn(
    client_for, researcher, disputed, items
):
    from sklearn.metrics import cohen_kappa_score

    # Third item agreed: pairs (male, female), (other, low_quality), (male, male).
    for user in ("anna", "ben"):
        client = client_for(get_user_model().objects.get(username=user))
        client.get(_label_url(items[0].study))
        client.post(_submit_url(items[2]), _gender("male"))
    response = client_for(researcher).get(reverse("annotate:agreement"))
    html = _html(response)
    expected = cohen_kappa_score(["male", "other", "male"], ["female", "low_quality", "male"])
    assert response.status_code == 200
    assert f'<td class="kappa">{expected:.3f}</td>' in html
    assert "<th>Low quality</th>" in html  # the confusion matrix in display names
    assert "anna &amp; ben" in html
    assert "profession" in html
    assert "sdxl" in html
    assert "Fleiss" not in html  # two labels per item
    assert response.context["report"]["n_items"] == 3


def test_agreement_page_filters_by_model_and_says_when_nothing_is_labelled(client_for, researcher, items):
    response = client_for(researcher).get(reverse("annotate:agreement"), {"t2i_model": "sdxl"})
    assert response.status_code == 200
    assert "No item has two answers to this question yet" in _html(response)


def test_agreement_page_reports_fleiss_and_krippendorff_with_three_labels_per_item(
    client_for, researcher, annotator_c, study
):
    study.labels_per_item = 3
    study.save()
    study.annotators.add(annotator_c)
    item = ItemFactory(prompt=PromptFactory(study=study))
    for user in study.annotators.all():
        client = client_for(user)
        client.get(_label_url(study))
        client.post(_submit_url(item), _gender("male" if user != annotator_c else "female"))
    html = _html(client_for(researcher).get(reverse("annotate:agreement", args=[study.slug])))
    assert "Fleiss" in html
    assert "Krippendorff" in html


def test_agreement_is_per_question_with_an_overview_of_every_question(
    client_for, researcher, annotator_a, annotator_b, annotator_c, attribute_study
):
    from sklearn.metrics import cohen_kappa_score

    study, neutral, explicit = attribute_study
    boots = {annotator_a: ("yes", "yes"), annotator_b: ("yes", "no"), annotator_c: ("no", "no")}
    for annotator, (first, second) in boots.items():
        for item, value in ((neutral, first), (explicit, second)):
            services.assignment_queue(study=study, annotator=annotator, size=2)
            services.annotation_submit(item=item, annotator=annotator, answers={"boots": value})
    client = client_for(researcher)
    response = client.get(reverse("annotate:agreement", args=[study.slug]), {"question": "boots"})
    report = response.context["report"]
    assert report["question"] == "boots"
    assert report["n_items"] == 2
    # Rater A of each item is its lowest-id annotator: anna, then ben.
    assert report["cohen_kappa"] == pytest.approx(cohen_kappa_score(["yes", "yes"], ["yes", "no"]))
    text = _text(response)
    assert "Fleiss" in text  # three annotators per item
    assert response.context["overview"][0]["question"].key == "boots"
    assert len(response.context["overview"]) == 15
    hat = client.get(reverse("annotate:agreement", args=[study.slug]), {"question": "hat"})
    assert hat.context["report"]["n_items"] == 1  # only the neutral item asks about hats


def test_dispute_screen_shows_each_labels_time_in_seconds(client_for, annotator_a, researcher, items):
    client = client_for(annotator_a)
    client.get(_label_url(items[0].study))
    client.post(_submit_url(items[0]), _gender("male", duration_ms="2345"))
    html = _html(client_for(researcher).get(reverse("annotate:image", args=[items[0].pk])))
    assert "<td>2.3</td>" in html


# --- cost of a key press ------------------------------------------------------------------------


# Statements of one htmx submit-and-next, counted as Django logs them: the session and user
# lookups (2), the study with the membership check and its questions (1), SAVEPOINT and RELEASE
# (2: BEGIN and COMMIT outside a test's transaction), the answers (4: the item lock that counts
# the seat and checks membership, the seat completed with the item's labels read in its
# RETURNING, the label rows, their revisions — the last two one statement on PostgreSQL), the
# next seat (3: the probe with the progress counter, the seat INSERT, the open seats with their
# items and images). Agreement adds the final label and its revision (2; 1 on PostgreSQL).
def _submit_next_queries(*, agreeing: bool = False) -> int:
    postgresql = connection.vendor == "postgresql"
    base = 11 if postgresql else 12
    return base + ((1 if postgresql else 2) if agreeing else 0)


@pytest.mark.parametrize("n_items", [3, 60])
def test_submit_and_next_runs_a_fixed_small_number_of_queries_whatever_the_study_size(
    client_for, annotator_a, annotator_b, study, n_items, django_assert_max_num_queries
):
    prompt = PromptFactory(study=study)
    ItemFactory.create_batch(n_items, prompt=prompt)
    for _ in range(2):  # others' finished items ahead of the annotator's
        seat = services.assignment_queue(study=study, annotator=annotator_b, size=1)[0]
        submit(item=seat.item, annotator=annotator_b, value="female")
    client = client_for(annotator_a)
    for _ in range(2):
        first = client.get(_label_url(study))
        url = reverse("annotate:label_submit", args=[study.slug, _shown_item_id(first)])
        with django_assert_max_num_queries(_submit_next_queries()):
            response = client.post(url, _gender("male", request_id=_request_id(first)), **HTMX)
        assert response.status_code == 200
    assert Label.objects.filter(annotator=annotator_a).count() == 2


def test_submit_that_completes_an_agreement_stays_within_its_query_budget(
    client_for, annotator_a, annotator_b, items, django_assert_max_num_queries
):
    study = items[0].study
    seat = services.assignment_queue(study=study, annotator=annotator_b, size=1)[0]
    submit(item=seat.item, annotator=annotator_b, value="male")
    client = client_for(annotator_a)
    first = client.get(_label_url(study))
    assert _shown_item_id(first) == seat.item.pk
    url, data = _submit_url(seat.item), _gender("male", request_id=_request_id(first))
    with django_assert_max_num_queries(_submit_next_queries(agreeing=True)):
        response = client.post(url, data, **HTMX)
    assert response.status_code == 200
    assert FinalLabel.objects.get(item=seat.item, question=question_of(seat.item)).value == "male"
    assert _shown_item_id(response) == items[1].pk


def test_server_timing_header_reports_wall_cpu_and_database_time_when_switched_on(
    client_for, annotator_a, items, settings
):
    settings.BIASLAB_SERVER_TIMING = True
    settings.MIDDLEWARE = ["config.timing.ServerTimingMiddleware", *settings.MIDDLEWARE]
    response = client_for(annotator_a).get(_label_url(items[0].study))
    timing = response["Server-Timing"]
    assert re.fullmatch(r'app;dur=[\d.]+, cpu;dur=[\d.]+, db;dur=[\d.]+;desc="\d+ statements"', timing)
    assert int(re.search(r'desc="(\d+)', timing).group(1)) > 0


def test_server_timing_header_is_absent_unless_switched_on(client_for, annotator_a, items, settings):
    settings.BIASLAB_SERVER_TIMING = False
    settings.MIDDLEWARE = ["config.timing.ServerTimingMiddleware", *settings.MIDDLEWARE]
    response = client_for(annotator_a).get(_label_url(items[0].study))
    assert response.status_code == 200
    assert "Server-Timing" not in response


# --- zoom on the labeling and review screens (zoom.js drives it; tests/browser/test_zoom.py) ---


def _zoom_bar(html: str) -> str:
    match = re.search(r'<div class="zoom-bar".*?</div>', html, re.S)
    assert match, "no zoom controls on the screen"
    return match.group(0)


def test_the_label_screen_renders_the_zoom_controls_and_a_frame_around_the_image(
    client_for, annotator_a, items
):
    html = _html(client_for(annotator_a).get(_label_url(items[0].study)))
    bar = _zoom_bar(html)
    for control in ('data-zoom-step="-1"', 'data-zoom-step="1"', "data-zoom-fit", "data-zoom-cycle"):
        assert control in bar
    assert "<span data-zoom-state>Fit</span>" in bar
    assert 'id="label-region" data-zoom-root' in html
    assert re.search(r'<div class="zoom-viewport" data-zoom-viewport><img id="current-image"', html)
    keys = re.search(r'<details id="guidelines".*?</details>', html, re.S).group(0)
    for key in ("+", "-", "0"):
        assert f"<kbd>{key}</kbd>" in keys
    assert "Zoom in" in keys


def test_a_pair_gets_one_zoom_bar_and_a_frame_around_each_image(client_for, annotator_a, pair_study):
    study, _pairs = pair_study
    html = _html(client_for(annotator_a).get(_label_url(study)))
    assert html.count('class="zoom-bar"') == 1
    assert html.count("data-zoom-viewport><img") == 2


def test_a_study_key_that_is_a_zoom_key_wins_and_the_zoom_key_is_not_listed(client_for, annotator_a, study):
    Question.objects.filter(study=study, key="gender").update(
        choices=[
            {"value": "yes", "name": "Somebody", "key": "0", "clear": True},
            {"value": "no", "name": "Nobody", "key": "n", "clear": True},
        ],
    )
    ItemFactory(prompt=PromptFactory(study=study))
    html = _html(client_for(annotator_a).get(_label_url(study)))
    keys = re.search(r'<details id="guidelines".*?</details>', html, re.S).group(0)
    assert "Fit the image" not in keys  # 0 answers "Somebody" here
    assert "Zoom in" in keys
    assert 'data-key="0"' in html


def test_the_dispute_and_item_screens_render_the_zoom_controls(client_for, researcher, disputed):
    client = client_for(researcher)
    for url in (
        reverse("annotate:dispute", args=[disputed[0].pk]),
        reverse("annotate:image", args=[disputed[0].pk]),
    ):
        html = _html(client.get(url))
        _zoom_bar(html)
        assert 'class="review-media" data-zoom-root' in html
        assert "data-zoom-viewport><img" in html
        assert "annotate/zoom.js" in html
