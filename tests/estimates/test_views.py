"""The estimate page: researchers only on every verb, the "label N more" form, the pending notice."""

from __future__ import annotations

import pytest
from django.test import Client

from estimates import estimands
from estimates.models import SamplingRound
from estimates.services import sampling_round_create
from tests.factories import StudyFactory

pytestmark = pytest.mark.django_db

URL = "/reports/estimate/?study=gender"


@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
@pytest.mark.parametrize("method", ["get", "head", "post", "put", "patch", "delete", "options"])
def test_only_researchers_may_use_the_page_whatever_the_verb(
    sampled_study, client_for, request, persona, method
):
    client = client_for(request.getfixturevalue(persona))
    response = getattr(client, method)(
        URL, {"budget": "3", "design": "uniform"} if method == "post" else None
    )
    assert response.status_code == 403
    assert not SamplingRound.objects.exists()


def test_anonymous_users_are_sent_to_log_in(sampled_study):
    for method in ("get", "post"):
        response = getattr(Client(), method)(URL)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    assert not SamplingRound.objects.exists()


def test_other_verbs_are_not_allowed_for_researchers(sampled_study, client_for, researcher):
    assert client_for(researcher).put(URL).status_code == 405


def test_the_page_before_any_round_shows_the_detector_score_and_the_form(
    sampled_study, client_for, researcher
):
    response = client_for(researcher).get(URL)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Estimate from few labels" in text  # the report navigation links here
    assert "Label N more" in text
    assert "No complete sampling round yet" in text
    assert response.context["table"].rows[0][0].value == "sd3"


def test_label_n_more_draws_a_round_and_redirects(sampled_study, client_for, researcher):
    response = client_for(researcher).post(URL, {"budget": "6", "design": "uniform"})
    assert response.status_code == 302
    assert response["Location"] == "/reports/estimate/?study=gender&detector=fake"
    sampling_round = SamplingRound.objects.get()
    assert (sampling_round.budget, sampling_round.created_by) == (6, researcher)


def test_label_n_more_by_htmx_redirects_the_client(sampled_study, client_for, researcher):
    response = client_for(researcher).post(
        URL, {"budget": "6", "design": "uniform"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/reports/estimate/?study=gender&detector=fake"
    assert SamplingRound.objects.count() == 1


def test_bad_input_is_shown_inline_on_the_field(sampled_study, client_for, researcher):
    client = client_for(researcher)
    response = client.post(URL, {"budget": "999", "design": "uniform"})
    assert response.status_code == 400
    assert "999 is more than the 48 image(s)" in response.content.decode()
    partial = client.post(URL, {"budget": "0", "design": "uniform"}, headers={"HX-Request": "true"})
    assert partial.status_code == 200
    body = partial.content.decode()
    assert body.lstrip().startswith('<form method="post"')
    assert 'id="budget-errors"' in body
    active = client.post(URL, {"budget": "3", "design": "active"}, headers={"HX-Request": "true"})
    assert "active needs the labels of an earlier round" in active.content.decode()
    assert not SamplingRound.objects.exists()


def test_the_form_needs_the_csrf_token(sampled_study, researcher):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    assert client.post(URL, {"budget": "3", "design": "uniform"}).status_code == 403
    assert not SamplingRound.objects.exists()


def test_a_pending_round_is_announced_and_a_finished_one_plotted(
    sampled_study, client_for, researcher, monkeypatch, detached_worker
):
    from estimates import services

    monkeypatch.setattr(services, "estimate_worker_start", lambda: None)  # started, run below
    first = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=1)
    client = client_for(researcher)
    client.get(URL)
    services.estimate_jobs_work()
    text = client.get(URL).content.decode()
    assert "Round 1 is pending" in text
    sampled_study.finish(first)
    # The page shows the estimate it kept, marked, while the worker computes the current one.
    stale = client.get(URL).content.decode()
    assert "Round 1 is pending" in stale
    assert 'id="stale"' in stale
    assert 'hx-trigger="every 2s"' in stale
    services.estimate_jobs_work()
    response = client.get(URL, headers={"HX-Request": "true"})
    text = response.content.decode()
    assert "Round 1 is pending" not in text
    assert 'id="stale"' not in text
    assert 'id="chart-later"' in text  # one complete round: one point per line, no chart yet
    tables = response.context["prompt_tables"]
    assert [t["t2i_model"] for t in tables] == ["sd3", "sdxl"]
    assert {r["prompt"] for r in tables[0]["rows"]} == {
        "a photo of a doctor",
        "a photo of a nurse",
        "a photo of a teacher",
    }
    assert "Prompt scores of sdxl (3 prompts)" in text


def test_an_htmx_get_renders_only_the_results(sampled_study, client_for, researcher):
    response = client_for(researcher).get(URL, headers={"HX-Request": "true"})
    assert response.content.decode().lstrip().startswith('<div id="results"')


def test_a_study_of_a_protocol_without_an_estimate_has_no_estimate_page(
    db, client_for, researcher, monkeypatch
):
    # Every protocol has its estimate: unregister one to see the refusal.
    monkeypatch.delitem(estimands.ESTIMANDS, "objects")
    StudyFactory(slug="boxes", protocol="objects")
    assert client_for(researcher).get("/reports/estimate/?study=boxes").status_code == 404


def test_the_report_overview_links_to_the_estimate(sampled_study, client_for, researcher):
    text = client_for(researcher).get("/reports/?study=gender").content.decode()
    assert 'href="/reports/estimate/?study=gender"' in text


def test_the_pending_note_names_the_model_it_counts(sampled_study, client_for, researcher):
    first = sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=1)
    sampled_study.finish(first)
    sampling_round_create(study=sampled_study.study, detector="fake", budget=10, seed=2)
    warnings = client_for(researcher).get(URL).context["warnings"]
    pending = [w for w in warnings if "wait for a final label" in w]
    assert len(pending) == 2
    assert any(" image(s) of sdxl drawn in round(s) 2" in w for w in pending)
    assert any(" image(s) of sd3 drawn in round(s) 2" in w for w in pending)
    assert not any("of this model" in w for w in warnings)


def test_a_round_shows_drawn_and_already_labelled_images_apart(sampled_study, client_for, researcher):
    # Five items already have final labels: the round takes them with certainty (π = 1), but
    # they are not drawn for labelling.
    sampled_study.label(sampled_study.items[:5])
    sampling_round = sampling_round_create(study=sampled_study.study, detector="fake", budget=3, seed=4)
    assert sampling_round.n_already_labelled == 5
    assert sampling_round.n_drawn == sampling_round.n_selected - 5
    text = client_for(researcher).get(URL).content.decode()
    rounds = text[text.index('id="rounds"') :]
    assert ">Drawn</th>" in rounds
    assert ">Already labelled</th>" in rounds
    assert ">Selected</th>" not in rounds
    assert f"<td>3</td><td>{sampling_round.n_drawn}</td><td>5</td>" in rounds


def test_the_table_shows_a_point_inside_its_interval_the_plug_in_by_name_lambda_and_effective_labels(
    sampled_study, client_for, researcher
):
    sampled_study.finish(sampling_round_create(study=sampled_study.study, detector="fake", budget=12, seed=3))
    response = client_for(researcher).get(URL)
    table = response.context["table"]
    keys = [c.key for c in table.columns]
    assert keys[:4] == ["t2i_model", "estimate", "ci95", "plug_in"]
    assert {"lambda", "effective_labels"} <= set(keys)
    labels = {c.key: c.label for c in table.columns}
    assert labels["plug_in"] == "Plug-in"
    for row in table.rows:
        cells = dict(zip(keys, row, strict=True))
        low, high = cells["ci95"].value
        assert low <= cells["estimate"].value <= high
        assert 0.0 <= cells["lambda"].value <= 1.0
        assert cells["effective_labels"].value > 0
        score = response.context["estimate"].as_json()[cells["t2i_model"].value]["model_bias_score"]
        assert cells["estimate"].value == pytest.approx(score["bias_corrected"])
        assert cells["plug_in"].value == pytest.approx(score["estimate"])
    text = response.content.decode()
    assert "Effective labels" in text
    assert 'class="data report estimate-summary"' in text
