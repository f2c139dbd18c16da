"""The HTML screens: labeling with and without JavaScript, undo, disputes, images, agreement."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotate import services
from annotate.models import FinalLabel, Label, LabelRevision
from tests.factories import ImageFactory, PromptFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def images(study):
    prompt = PromptFactory(study=study, category="profession", word="lawyer")
    return [ImageFactory(prompt=prompt) for _ in range(3)]


def _shown_image_id(response) -> int:
    match = re.search(r'id="current-image"[^>]*data-image-id="(\d+)"', response.content.decode())
    assert match, response.content.decode()
    return int(match.group(1))


def _request_id(response) -> str:
    return re.search(r'name="request_id" value="([0-9a-f]+)"', response.content.decode()).group(1)


def _submit_url(image) -> str:
    return reverse("annotate:label_submit", args=[image.study.slug, image.pk])


def _label_url(study) -> str:
    return reverse("annotate:label_study", args=[study.slug])


# --- labeling -----------------------------------------------------------------------------------


def test_annotator_with_one_study_goes_straight_to_labeling(client_for, annotator_a, study):
    response = client_for(annotator_a).get(reverse("annotate:label"))
    assert response.status_code == 302
    assert response["Location"] == _label_url(study)


def test_annotator_with_several_studies_picks_one_by_name(client_for, annotator_a, study):
    from tests.factories import StudyFactory

    other = StudyFactory(name="Attributes", slug="attributes")
    other.annotators.add(annotator_a)
    response = client_for(annotator_a).get(reverse("annotate:label"))
    assert response.status_code == 200
    assert _label_url(study) in response.content.decode()
    assert _label_url(other) in response.content.decode()


def test_label_screen_shows_first_image_counter_keys_and_preloads_the_next(client_for, annotator_a, images):
    response = client_for(annotator_a).get(_label_url(images[0].study))
    html = response.content.decode()
    assert response.status_code == 200
    assert _shown_image_id(response) == images[0].pk
    assert f'<link rel="preload" as="image" href="{images[1].url}">' in html
    assert "<strong>0</strong> done" in html
    assert "<strong>3</strong> remaining" in html
    for key in "MFLOZ":
        assert f"<kbd>{key}</kbd>" in html
    assert 'method="post"' in html  # works without JavaScript
    assert "label.js" in html


def test_prompt_is_hidden_unless_the_study_shows_it(client_for, annotator_a, images):
    study = images[0].study
    client = client_for(annotator_a)
    assert images[0].prompt.text not in client.get(_label_url(study)).content.decode()
    study.show_prompt = True
    study.save()
    assert images[0].prompt.text in client.get(_label_url(study)).content.decode()


def test_plain_form_post_saves_label_and_redirects_to_the_next_image(client_for, annotator_a, images):
    client = client_for(annotator_a)
    first = client.get(_label_url(images[0].study))
    response = client.post(
        _submit_url(images[0]),
        {"value": "male", "request_id": _request_id(first), "shown_at": "1"},
    )
    assert response.status_code == 302
    assert response["Location"] == _label_url(images[0].study)
    label = Label.objects.get(image=images[0], annotator=annotator_a)
    assert label.value == "male"
    assert label.duration_ms is not None  # server fallback, capped at an hour
    nxt = client.get(response["Location"])
    assert _shown_image_id(nxt) == images[1].pk
    assert "<strong>1</strong> done" in nxt.content.decode()


def test_htmx_submit_returns_only_the_next_image_partial_with_client_duration(
    client_for, annotator_a, images
):
    client = client_for(annotator_a)
    first = client.get(_label_url(images[0].study))
    response = client.post(
        _submit_url(images[0]),
        {"value": "female", "request_id": _request_id(first), "duration_ms": "1234"},
        **HTMX,
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert html.lstrip().startswith('<section id="label-region"')
    assert _shown_image_id(response) == images[1].pk
    assert Label.objects.get(image=images[0], annotator=annotator_a).duration_ms == 1234


def test_double_submit_with_the_same_request_id_is_stored_once(client_for, annotator_a, images):
    client = client_for(annotator_a)
    rid = _request_id(client.get(_label_url(images[0].study)))
    for _ in range(2):
        client.post(_submit_url(images[0]), {"value": "male", "request_id": rid}, **HTMX)
    assert Label.objects.filter(image=images[0]).count() == 1
    assert LabelRevision.objects.filter(label__image=images[0]).count() == 1


def test_other_without_reason_keeps_the_annotator_on_the_same_image(client_for, annotator_a, images):
    client = client_for(annotator_a)
    rid = _request_id(client.get(_label_url(images[0].study)))
    response = client.post(_submit_url(images[0]), {"value": "other", "request_id": rid}, **HTMX)
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()
    assert "reason" in response.content.decode().lower()
    assert _shown_image_id(response) == images[0].pk
    assert _request_id(response) == rid  # the corrected submit is still the same submit
    assert not Label.objects.filter(image=images[0]).exists()


def test_unknown_label_value_gets_a_clear_error_and_no_row(client_for, annotator_a, images):
    client = client_for(annotator_a)
    client.get(_label_url(images[0].study))
    response = client.post(_submit_url(images[0]), {"value": "cat"})
    assert response.status_code == 400
    assert "cat" in response.content.decode()
    assert not Label.objects.exists()


def test_missing_value_is_refused_without_losing_place(client_for, annotator_a, images):
    client = client_for(annotator_a)
    client.get(_label_url(images[0].study))
    response = client.post(_submit_url(images[0]), {"reason": "x"})
    assert response.status_code == 400
    assert "Choose a label." in response.content.decode()
    assert _shown_image_id(response) == images[0].pk


def test_html_in_a_reason_is_escaped_on_every_screen(
    client_for, annotator_a, annotator_b, researcher, images
):
    evil = '<script>alert("x")</script>'
    a, b = client_for(annotator_a), client_for(annotator_b)
    a.get(_label_url(images[0].study))
    b.get(_label_url(images[0].study))
    a.post(_submit_url(images[0]), {"value": "other", "reason": evil})
    b.post(_submit_url(images[0]), {"value": "male"})
    # The annotator's own screen after going back, the dispute screen and the image page.
    pages = [
        a.get(_label_url(images[0].study) + f"?image={images[0].pk}"),
        client_for(researcher).get(reverse("annotate:dispute", args=[images[0].pk])),
        client_for(researcher).get(reverse("annotate:image", args=[images[0].pk])),
    ]
    for page in pages:
        html = page.content.decode()
        assert evil not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_stale_form_after_resolution_says_so_and_shows_the_next_image(
    client_for, annotator_a, researcher, images
):
    client = client_for(annotator_a)
    client.get(_label_url(images[0].study))
    services.final_label_set(image=images[0], value="female", decided_by=researcher)
    response = client.post(_submit_url(images[0]), {"value": "male"}, **HTMX)
    assert "already resolved" in response.content.decode()
    assert _shown_image_id(response) != images[0].pk
    plain = client.post(_submit_url(images[0]), {"value": "male"}, follow=True)
    assert "already resolved" in plain.content.decode()
    assert not Label.objects.filter(image=images[0]).exists()


def test_undo_shows_the_previous_image_with_its_label_and_allows_changing_it(client_for, annotator_a, images):
    client = client_for(annotator_a)
    study = images[0].study
    client.get(_label_url(study))
    client.post(_submit_url(images[0]), {"value": "male"})
    current = client.get(_label_url(study))
    assert _shown_image_id(current) == images[1].pk
    undo = client.get(reverse("annotate:label_undo", args=[study.slug]) + f"?before={images[1].pk}")
    assert undo.status_code == 302
    back = client.get(undo["Location"])
    assert _shown_image_id(back) == images[0].pk
    assert "Your label:" in back.content.decode()
    client.post(_submit_url(images[0]), {"value": "female"})
    assert Label.objects.get(image=images[0], annotator=annotator_a).value == "female"
    assert LabelRevision.objects.filter(label__image=images[0]).count() == 2
    assert _shown_image_id(client.get(_label_url(study))) == images[1].pk


def test_undo_over_htmx_returns_the_previous_image_partial(client_for, annotator_a, images):
    client = client_for(annotator_a)
    study = images[0].study
    client.get(_label_url(study))
    client.post(_submit_url(images[0]), {"value": "male"})
    url = reverse("annotate:label_undo", args=[study.slug]) + f"?before={images[1].pk}"
    response = client.get(url, **HTMX)
    assert response.status_code == 200
    assert _shown_image_id(response) == images[0].pk


def test_undo_with_nothing_to_undo_says_so(client_for, annotator_a, images):
    client = client_for(annotator_a)
    study = images[0].study
    response = client.get(reverse("annotate:label_undo", args=[study.slug]), follow=True)
    assert "no earlier label" in response.content.decode()


def test_annotator_never_sees_anyone_elses_label(client_for, annotator_a, annotator_b, images):
    a, b = client_for(annotator_a), client_for(annotator_b)
    a.get(_label_url(images[0].study))
    a.post(_submit_url(images[0]), {"value": "other", "reason": "a distinctive reason"})
    html = b.get(_label_url(images[0].study)).content.decode()
    assert _shown_image_id(b.get(_label_url(images[0].study))) == images[0].pk
    assert "a distinctive reason" not in html
    assert "Your label:" not in html


def test_when_no_work_is_left_the_screen_says_so(client_for, annotator_a, study):
    response = client_for(annotator_a).get(_label_url(study))
    assert "No images left for you" in response.content.decode()


def test_labels_from_another_label_set_use_its_keys(client_for, annotator_a, study):
    study.label_set = [
        {"value": "yes", "name": "Yes", "key": "y"},
        {"value": "no", "name": "No", "key": "n"},
    ]
    study.unresolvable_label = "no"
    study.save()
    img = ImageFactory(prompt=PromptFactory(study=study))
    client = client_for(annotator_a)
    html = client.get(_label_url(study)).content.decode()
    assert 'data-key="y"' in html
    assert 'data-key="m"' not in html
    client.post(_submit_url(img), {"value": "yes"})
    assert Label.objects.get(image=img).value == "yes"


# --- disputes ---------------------------------------------------------------------------------


@pytest.fixture
def disputed(client_for, annotator_a, annotator_b, images):
    a, b = client_for(annotator_a), client_for(annotator_b)
    for client in (a, b):
        client.get(_label_url(images[0].study))
    a.post(_submit_url(images[0]), {"value": "male"})
    b.post(_submit_url(images[0]), {"value": "female"})
    a.post(_submit_url(images[1]), {"value": "other", "reason": "a mannequin"})
    b.post(_submit_url(images[1]), {"value": "low_quality"})
    return images[:2]


def test_dispute_queue_lists_images_whose_labels_differ(client_for, researcher, disputed):
    response = client_for(researcher).get(reverse("annotate:disputes"))
    html = response.content.decode()
    assert response.status_code == 200
    assert disputed[0].source_path in html
    assert disputed[1].source_path in html
    assert "disputed" in html


def test_dispute_shows_both_labels_with_names_reasons_and_prompt(client_for, researcher, disputed):
    html = client_for(researcher).get(reverse("annotate:dispute", args=[disputed[1].pk])).content.decode()
    for text in ("anna", "ben", "a mannequin", disputed[1].prompt.text, 'data-key="u"', "<kbd>M</kbd>"):
        assert text in html


def test_resolving_a_dispute_records_who_and_moves_to_the_next(client_for, researcher, disputed):
    client = client_for(researcher)
    response = client.post(
        reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female", "note": "long hair"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("annotate:dispute", args=[disputed[1].pk])
    final = FinalLabel.objects.get(image=disputed[0])
    assert (final.value, final.source, final.decided_by, final.note) == (
        "female",
        "resolved",
        researcher,
        "long hair",
    )


def test_cannot_agree_key_sets_the_studys_unresolvable_label(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "male"})
    response = client.post(reverse("annotate:dispute", args=[disputed[1].pk]), {"unresolvable": "1"})
    assert response["Location"] == reverse("annotate:disputes", args=[disputed[1].study.slug])
    assert FinalLabel.objects.get(image=disputed[1]).value == "low_quality"


def test_resolving_with_neither_label_nor_cannot_agree_is_refused(client_for, researcher, disputed):
    response = client_for(researcher).post(reverse("annotate:dispute", args=[disputed[0].pk]), {"note": "hm"})
    assert response.status_code == 400
    assert "Choose a final label" in response.content.decode()
    assert not FinalLabel.objects.filter(image=disputed[0]).exists()


def test_resolving_with_an_unknown_label_is_refused(client_for, researcher, disputed):
    response = client_for(researcher).post(
        reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "cat"}
    )
    assert response.status_code == 400
    assert not FinalLabel.objects.filter(image=disputed[0]).exists()


# --- images, history, agreement, stats --------------------------------------------------------


def test_images_list_filters_by_state_and_shows_every_state(client_for, researcher, disputed, images):
    client = client_for(researcher)
    html = client.get(reverse("annotate:images")).content.decode()
    assert "disputed" in html
    assert "unlabelled" in html
    filtered = client.get(reverse("annotate:images"), {"state": "unlabelled"}).content.decode()
    assert images[2].source_path in filtered
    assert disputed[0].source_path not in filtered


def test_images_list_filters_by_model_and_category_and_paginates(client_for, researcher, study):
    other = PromptFactory(study=study, category="trait", word="kind")
    for _ in range(51):
        ImageFactory(prompt=other, t2i_model="dalle3")
    ImageFactory(prompt=PromptFactory(study=study, category="profession"), t2i_model="sdxl")
    client = client_for(researcher)
    response = client.get(reverse("annotate:images"), {"t2i_model": "dalle3", "category": "trait"})
    assert response.context["page"].paginator.count == 51
    assert "page 1 of 2" in response.content.decode()
    page2 = client.get(reverse("annotate:images"), {"t2i_model": "dalle3", "category": "trait", "page": 2})
    assert len(page2.context["page"].object_list) == 1


def test_image_detail_shows_labels_final_label_and_history(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female", "note": "n1"})
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "male", "note": "n2"})
    html = client.get(reverse("annotate:image", args=[disputed[0].pk])).content.decode()
    for text in ("anna", "ben", "rita", "n1", "n2", "resolved", "History"):
        assert text in html


def test_annotator_stats_show_labels_done_per_annotator(client_for, researcher, disputed):
    client = client_for(researcher)
    client.post(reverse("annotate:dispute", args=[disputed[0].pk]), {"value": "female"})
    response = client.get(reverse("annotate:annotator_stats"))
    html = re.sub(r"\s+", " ", response.content.decode())
    assert response.status_code == 200
    # Anna said male, Ben female; the final label is female. Each gave two labels.
    assert "<tr><td>anna</td><td>2</td>" in html
    assert "<td>0 %</td>" in html
    assert "<td>100 %</td>" in html
    assert "anna" in html
    assert "ben" in html


def test_researcher_with_several_studies_picks_one(client_for, researcher, study):
    from tests.factories import StudyFactory

    StudyFactory(name="Second", slug="second")
    response = client_for(researcher).get(reverse("annotate:disputes"))
    assert response.status_code == 200
    assert reverse("annotate:disputes", args=["second"]) in response.content.decode()


def test_no_role_page_explains_what_to_ask_for(client_for, outsider):
    response = client_for(outsider).get(reverse("annotate:no_role"))
    assert response.status_code == 200
    assert "neither an annotator nor a researcher" in response.content.decode()


def test_agreement_page_shows_kappa_confusion_and_facets_equal_to_sklearn(
    client_for, researcher, disputed, images
):
    from sklearn.metrics import cohen_kappa_score

    # Third image agreed: pairs (male, female), (other, low_quality), (male, male).
    for user in ("anna", "ben"):
        from django.contrib.auth import get_user_model

        client = client_for(get_user_model().objects.get(username=user))
        client.get(_label_url(images[0].study))
        client.post(_submit_url(images[2]), {"value": "male"})
    response = client_for(researcher).get(reverse("annotate:agreement"))
    html = response.content.decode()
    expected = cohen_kappa_score(["male", "other", "male"], ["female", "low_quality", "male"])
    assert response.status_code == 200
    assert f'<td class="kappa">{expected:.3f}</td>' in html
    assert "anna &amp; ben" in html
    assert "profession" in html
    assert "sdxl" in html
    assert "Fleiss" not in html  # two labels per image
    assert response.context["report"]["n_images"] == 3


def test_agreement_page_filters_by_model_and_says_when_nothing_is_labelled(client_for, researcher, images):
    response = client_for(researcher).get(reverse("annotate:agreement"), {"t2i_model": "sdxl"})
    assert response.status_code == 200
    assert "No image has two labels yet" in response.content.decode()


def test_agreement_page_reports_fleiss_and_krippendorff_with_three_labels_per_image(
    client_for, researcher, annotator_c, study
):
    study.labels_per_image = 3
    study.save()
    study.annotators.add(annotator_c)
    img = ImageFactory(prompt=PromptFactory(study=study))
    for user in study.annotators.all():
        client = client_for(user)
        client.get(_label_url(study))
        client.post(_submit_url(img), {"value": "male" if user != annotator_c else "female"})
    html = client_for(researcher).get(reverse("annotate:agreement", args=[study.slug])).content.decode()
    assert "Fleiss" in html
    assert "Krippendorff" in html


def test_dispute_screen_shows_each_labels_time_in_seconds(client_for, annotator_a, researcher, images):
    client = client_for(annotator_a)
    client.get(_label_url(images[0].study))
    client.post(_submit_url(images[0]), {"value": "male", "duration_ms": "2345"})
    html = client_for(researcher).get(reverse("annotate:image", args=[images[0].pk])).content.decode()
    assert "<td>2.3</td>" in html


# --- cost of a key press ------------------------------------------------------------------------

# Statements of one htmx submit-and-next, counted as Django logs them: the session and user
# lookups (2), the study with the membership check (1), BEGIN and COMMIT (2 — a SAVEPOINT and its
# RELEASE inside a test's transaction), the label write (6), the next seat (5) and the progress
# counter (1). Agreement adds the final label and its revision (2).
SUBMIT_NEXT_QUERIES = 17
SUBMIT_NEXT_AGREEING_QUERIES = SUBMIT_NEXT_QUERIES + 2


@pytest.mark.parametrize("n_images", [3, 60])
def test_submit_and_next_runs_a_fixed_small_number_of_queries_whatever_the_study_size(
    client_for, annotator_a, annotator_b, study, n_images, django_assert_max_num_queries
):
    prompt = PromptFactory(study=study)
    ImageFactory.create_batch(n_images, prompt=prompt)
    for _ in range(2):  # others' finished images ahead of the annotator's
        seat = services.assignment_queue(study=study, annotator=annotator_b, size=1)[0]
        services.annotation_submit(image=seat.image, annotator=annotator_b, value="female")
    client = client_for(annotator_a)
    for _ in range(2):
        first = client.get(_label_url(study))
        url = reverse("annotate:label_submit", args=[study.slug, _shown_image_id(first)])
        with django_assert_max_num_queries(SUBMIT_NEXT_QUERIES):
            response = client.post(url, {"value": "male", "request_id": _request_id(first)}, **HTMX)
        assert response.status_code == 200
    assert Label.objects.filter(annotator=annotator_a).count() == 2


def test_submit_that_completes_an_agreement_stays_within_its_query_budget(
    client_for, annotator_a, annotator_b, images, django_assert_max_num_queries
):
    study = images[0].study
    seat = services.assignment_queue(study=study, annotator=annotator_b, size=1)[0]
    services.annotation_submit(image=seat.image, annotator=annotator_b, value="male")
    client = client_for(annotator_a)
    first = client.get(_label_url(study))
    assert _shown_image_id(first) == seat.image.pk
    url, data = _submit_url(seat.image), {"value": "male", "request_id": _request_id(first)}
    with django_assert_max_num_queries(SUBMIT_NEXT_AGREEING_QUERIES):
        response = client.post(url, data, **HTMX)
    assert response.status_code == 200
    assert FinalLabel.objects.get(image=seat.image).value == "male"
    assert _shown_image_id(response) == images[1].pk


def test_server_timing_header_reports_wall_cpu_and_database_time_when_switched_on(
    client_for, annotator_a, images, settings
):
    settings.BIASLAB_SERVER_TIMING = True
    settings.MIDDLEWARE = ["config.timing.ServerTimingMiddleware", *settings.MIDDLEWARE]
    response = client_for(annotator_a).get(_label_url(images[0].study))
    timing = response["Server-Timing"]
    assert re.fullmatch(r'app;dur=[\d.]+, cpu;dur=[\d.]+, db;dur=[\d.]+;desc="\d+ statements"', timing)
    assert int(re.search(r'desc="(\d+)', timing).group(1)) > 0


def test_server_timing_header_is_absent_unless_switched_on(client_for, annotator_a, images, settings):
    settings.BIASLAB_SERVER_TIMING = False
    settings.MIDDLEWARE = ["config.timing.ServerTimingMiddleware", *settings.MIDDLEWARE]
    response = client_for(annotator_a).get(_label_url(images[0].study))
    assert response.status_code == 200
    assert "Server-Timing" not in response
