"""A participant's way through a join link with the Django client: link, guidelines, labels up to
the quota, completion code; coming back; refusals; the gate that keeps them on their labeling
screen; the researchers' page of links."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate import services as annotate_services
from annotate.models import Assignment, Label
from crowd.models import JoinLink, Participant
from crowd.services import guideline_examples_set, join_link_close, participant_join
from tests.annotate.gender import submit
from tests.annotate.test_views import _submit_next_queries
from tests.crowd.conftest import COMPLETION_URL
from tests.factories import ItemFactory, PromptFactory, StudyFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


def _join_url(token: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return reverse("crowd:join", kwargs={"token": token}) + (f"?{query}" if query else "")


def _shown_item_id(response) -> int:
    match = re.search(r'id="current-image"[^>]*data-item-id="(\d+)"', response.content.decode())
    assert match, response.content.decode()[:2000]
    return int(match.group(1))


def _request_id(response) -> str:
    return re.search(r'name="request_id" value="([0-9a-f]+)"', response.content.decode()).group(1)


def _enter(client: Client, token: str, pid: str) -> None:
    """Open the link as ``pid`` and agree to the guidelines."""
    response = client.get(_join_url(token, PROLIFIC_PID=pid))
    assert response.status_code == 302
    if response.url == reverse("crowd:guidelines"):
        assert client.post(reverse("crowd:guidelines"), {"consent": "yes"}).status_code == 302


def _label_one(client: Client, study, value: str = "male"):
    """Label the item on screen with the keyboard's request (htmx); the response."""
    screen = client.get(reverse("annotate:label_study", args=[study.slug]))
    item_id = _shown_item_id(screen)
    url = reverse("annotate:label_submit", args=[study.slug, item_id])
    return item_id, client.post(url, {"answer_gender": value, "request_id": _request_id(screen)}, **HTMX)


def test_a_participant_reads_the_guidelines_labels_to_the_quota_and_gets_the_completion_code(
    make_link, items, study
):
    guideline_examples_set(study=study, examples=[("", "male", items[0].key), ("", "female", items[1].key)])
    _link, token = make_link(quota=2)
    client = Client()
    response = client.get(_join_url(token, PROLIFIC_PID="pid-1"))
    assert response.status_code == 302
    assert response.url == reverse("crowd:guidelines")
    # Before agreeing, the labeling screen sends them to the guidelines.
    assert client.get(reverse("annotate:label_study", args=[study.slug])).url == reverse("crowd:guidelines")
    page = client.get(reverse("crowd:guidelines")).content.decode()
    assert page.count('alt="An example of') == 2
    assert items[0].item_images.get().image.url in page
    assert "label <strong>2</strong> items" in page
    refused = client.post(reverse("crowd:guidelines"), {})
    assert refused.status_code == 400
    assert client.post(reverse("crowd:guidelines"), {"consent": "yes"}).url == reverse(
        "annotate:label_study", args=[study.slug]
    )
    _first, response = _label_one(client, study)
    assert response.status_code == 200
    assert "HX-Redirect" not in response
    _second, response = _label_one(client, study, "female")
    assert response["HX-Redirect"] == reverse("crowd:done")
    done = client.get(reverse("crowd:done")).content.decode()
    assert 'id="completion-code">C1234<' in done
    assert f'content="10;url={COMPLETION_URL}"' in done.replace("&amp;", "&")
    participant = Participant.objects.get(panel_id="pid-1")
    assert participant.finished_at is not None
    assert participant.consented_at is not None
    # Done is done: the labeling screen now shows the code, and no seat is left held open.
    assert client.get(reverse("annotate:label_study", args=[study.slug])).url == reverse("crowd:done")
    assert not Assignment.objects.filter(annotator=participant.user, completed_at__isnull=True).exists()
    assert Label.objects.filter(annotator=participant.user).count() == 2


def test_the_quota_ends_a_plain_form_session_with_a_redirect_too(make_link, items, study):
    _link, token = make_link(quota=1)
    client = Client()
    _enter(client, token, "plain")
    screen = client.get(reverse("annotate:label_study", args=[study.slug]))
    url = reverse("annotate:label_submit", args=[study.slug, _shown_item_id(screen)])
    response = client.post(url, {"answer_gender": "male", "request_id": _request_id(screen)})
    assert response.status_code == 302
    assert response.url == reverse("crowd:done")


def test_a_study_that_runs_out_of_items_before_the_quota_still_gives_the_code(make_link, items, study):
    _link, token = make_link(quota=10)  # the study has 4 items
    client = Client()
    _enter(client, token, "short")
    # With work left, the completion page sends them back to label.
    assert client.get(reverse("crowd:done")).url == reverse("annotate:label_study", args=[study.slug])
    for _ in items[:-1]:
        _label_one(client, study)
    _item, last = _label_one(client, study)
    assert last["HX-Redirect"] == reverse("crowd:done")  # no next item: on to the code
    assert client.get(reverse("annotate:label_study", args=[study.slug])).url == reverse("crowd:done")
    done = client.get(reverse("crowd:done")).content.decode()
    assert 'id="completion-code">C1234<' in done
    assert "no more items for you" in done
    assert Participant.objects.get(panel_id="short").finished_at is not None


def test_the_labeling_screen_shows_a_participant_their_quota_and_costs_no_statement_more(
    make_link, items, study, client_for, annotator_a, django_assert_max_num_queries
):
    _link, token = make_link(quota=3)
    client = Client()
    _enter(client, token, "counted")
    screen = client.get(reverse("annotate:label_study", args=[study.slug]))
    assert "<strong>0</strong> of 3 items" in screen.content.decode()
    # Their quota line, not the count of the study's work left a lab's annotator sees.
    assert "remaining" not in screen.content.decode()
    item_id = _shown_item_id(screen)
    url = reverse("annotate:label_submit", args=[study.slug, item_id])
    # An ordinary annotator's key press, plus the gate's count of the participant's items.
    with django_assert_max_num_queries(_submit_next_queries() + 1):
        response = client.post(url, {"answer_gender": "male", "request_id": _request_id(screen)}, **HTMX)
    assert "<strong>1</strong> of 3 items" in response.content.decode()
    assert "remaining" not in response.content.decode()
    # An ordinary annotator has no quota: the study's work left instead.
    page = client_for(annotator_a).get(reverse("annotate:label_study", args=[study.slug])).content.decode()
    assert 'id="quota"' not in page
    assert "</strong> remaining" in page


def test_a_participants_key_press_counts_the_work_left_only_up_to_the_quota(
    make_link, items, study, client_for, annotator_a
):
    _link, token = make_link(quota=2)
    client = Client()
    _enter(client, token, "capped")
    screen = client.get(reverse("annotate:label_study", args=[study.slug]))
    url = reverse("annotate:label_submit", args=[study.slug, _shown_item_id(screen)])
    with CaptureQueriesContext(connection) as participant:
        client.post(url, {"answer_gender": "male", "request_id": _request_id(screen)}, **HTMX)
    with CaptureQueriesContext(connection) as annotator:
        client_for(annotator_a).get(reverse("annotate:label_study", args=[study.slug]))

    def limits(queries) -> list[str]:
        return re.findall(r"LIMIT (\d+)\) c\) AS claimable", " ".join(q["sql"] for q in queries))

    assert limits(participant.captured_queries) == ["3"]  # the quota, and one more to know of more
    assert set(limits(annotator.captured_queries)) == {"1001"}  # an annotator's "1000+ remaining"


def test_reopening_the_link_continues_and_never_gives_a_second_seat_on_an_item(make_link, items, study):
    _link, token = make_link(quota=3)
    first = Client()
    _enter(first, token, "again")
    labelled, _ = _label_one(first, study)
    # Another browser (or the session ended): the same id is the same account.
    second = Client()
    _enter(second, token, "again")
    assert Participant.objects.filter(panel_id="again").count() == 1
    screen = second.get(reverse("annotate:label_study", args=[study.slug]))
    assert _shown_item_id(screen) != labelled
    assert Label.objects.filter(annotator__crowd_participant__panel_id="again").count() == 1
    _label_one(second, study)
    seats = Assignment.objects.filter(annotator__crowd_participant__panel_id="again")
    assert len({seat.item_id for seat in seats}) == seats.count()


def test_a_second_panel_id_gets_its_own_account(make_link, items):
    _link, token = make_link()
    _enter(Client(), token, "one")
    _enter(Client(), token, "two")
    one, two = Participant.objects.order_by("panel_id")
    assert one.user_id != two.user_id


def test_another_id_on_the_same_browser_is_another_participant(make_link, items):
    _link, token = make_link()
    client = Client()
    _enter(client, token, "first")
    _enter(client, token, "second")
    assert int(client.session["_auth_user_id"]) == Participant.objects.get(panel_id="second").user_id


@pytest.mark.parametrize(
    ("how", "status", "says"),
    [
        ("closed", 410, "has been closed"),
        ("expired", 410, "has expired"),
        ("full", 410, "is full"),
        ("no id", 403, "needs your participant id (PROLIFIC_PID)"),
        ("unknown", 404, "is not valid"),
    ],
)
def test_a_link_that_takes_no_one_says_why_and_makes_no_account(make_link, items, how, status, says):
    link, token = make_link(max_participants=1 if how == "full" else None)
    params = {"PROLIFIC_PID": "late"}
    if how == "closed":
        join_link_close(link=link)
    elif how == "expired":
        JoinLink.objects.filter(pk=link.pk).update(expires_at="2000-01-01T00:00:00Z")
    elif how == "full":
        participant_join(link=link, panel_id="early")
    elif how == "no id":
        params = {}
    elif how == "unknown":
        token = token[:-1] + ("A" if token[-1] != "A" else "B")
    before = Participant.objects.count()
    response = Client().get(_join_url(token, **params))
    assert response.status_code == status
    assert says in response.content.decode()
    assert Participant.objects.count() == before


def test_a_link_without_panel_parameters_identifies_the_browser_session(make_link, items):
    _link, token = make_link(panel_params=[])
    client = Client()
    assert client.get(_join_url(token)).url == reverse("crowd:guidelines")
    client.get(_join_url(token))
    assert Participant.objects.count() == 1
    assert Participant.objects.get().panel_id.startswith("session-")


def test_new_accounts_through_links_are_rate_limited_per_address_but_returning_ones_are_not(
    make_link, items, settings
):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "join": "2/hour"},
    }
    _link, token = make_link()
    for pid in ("a", "b"):
        assert Client().get(_join_url(token, PROLIFIC_PID=pid)).status_code == 302
    refused = Client().get(_join_url(token, PROLIFIC_PID="c"))
    assert refused.status_code == 429
    assert "Too many new participants from your address" in refused.content.decode()
    assert Client().get(_join_url(token, PROLIFIC_PID="a")).status_code == 302
    assert sorted(Participant.objects.values_list("panel_id", flat=True)) == ["a", "b"]


# --- the gate: a participant reaches their labeling screen and nothing else -----------------------


@pytest.fixture
def participant_client(make_link, items, study):
    _link, token = make_link(quota=3)
    client = Client()
    _enter(client, token, "gated")
    return client


def _elsewhere(study, other_study, other_label) -> list[str]:
    return [
        reverse("annotate:label_study", args=[other_study.slug]),
        reverse("annotate:disputes", args=[study.slug]),
        reverse("annotate:images", args=[study.slug]),
        reverse("annotate:image", args=[other_label.item_id]),
        reverse("annotate:agreement", args=[study.slug]),
        reverse("annotate:annotator_stats", args=[study.slug]),
        reverse("reports:overview") + f"?study={study.slug}",
        reverse("crowd:links", args=[study.slug]),
        "/admin/",
        "/admin/crowd/participant/",
        "/api/studies/",
        "/api/labels/",
        f"/api/labels/{other_label.pk}/",
        f"/api/items/{other_label.item_id}/",
        f"/api/participants/?study={study.slug}",
        "/api/schema/",
    ]


@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_a_participant_reaches_no_other_study_page_admin_or_api(
    participant_client, study, annotator_a, method
):
    other_study = StudyFactory(slug="other")
    prompt = PromptFactory(study=other_study)
    other_item = ItemFactory(prompt=prompt)
    seat = annotate_services.assignment_queue(study=study, annotator=annotator_a, size=1)[0]
    other_label = submit(item=seat.item, annotator=annotator_a, value="male")
    # Even a study their account was added to by mistake stays closed to them.
    other_study.annotators.add(Participant.objects.get(panel_id="gated").user)
    for url in _elsewhere(study, other_study, other_label):
        response = getattr(participant_client, method)(url)
        # An API method an endpoint lacks is 405 for everyone (config.api), a participant too.
        lacks_method = url.startswith("/api/") and response.status_code == 405
        assert response.status_code == 403 or lacks_method, (method, url, response.status_code)
    assert other_item.labels.count() == 0


def test_a_participant_never_sees_another_participants_labels(make_link, participant_client, study, items):
    _link, token = make_link(quota=3)
    other = Client()
    _enter(other, token, "neighbour")
    theirs, _ = _label_one(other, study, "female")
    label = Label.objects.get(item_id=theirs, annotator__crowd_participant__panel_id="neighbour")
    page = participant_client.get(reverse("annotate:label_study", args=[study.slug]) + f"?item={theirs}")
    assert page.status_code == 200
    assert "Your label:" not in page.content.decode()
    assert participant_client.get(f"/api/labels/{label.pk}/").status_code == 403
    assert participant_client.get(reverse("annotate:label_undo", args=[study.slug])).status_code == 302


def test_home_sends_a_participant_to_their_labeling_screen(participant_client, study):
    assert participant_client.get("/").url == reverse("annotate:label_study", args=[study.slug])


# --- the researchers' page -------------------------------------------------------------------------


def test_a_researcher_makes_a_link_on_the_study_page_and_sees_its_url_once(client_for, researcher, study):
    client = client_for(researcher)
    url = reverse("crowd:links", args=[study.slug])
    assert f'href="{url}"' in client.get(reverse("annotate:images", args=[study.slug])).content.decode()
    data = {
        "quota": 40,
        "completion_url": COMPLETION_URL,
        "completion_code": "C1",
        "panel_params": "workerId",
    }
    response = client.post(url, data)
    assert response.status_code == 200
    shown = re.search(r'id="new-join-url">([^<]+)<', response.content.decode()).group(1)
    link = JoinLink.objects.get()
    assert link.quota == 40
    assert link.param_names == ["workerId"]
    assert link.created_by == researcher
    assert shown.split("/join/")[1].rstrip("/") not in client.get(url).content.decode()
    assert Client().get(shown.split("testserver")[1] + "?workerId=w1").status_code == 302
    client.post(reverse("crowd:link_close", args=[link.pk]))
    assert JoinLink.objects.get().closed_at is not None


@pytest.mark.parametrize(
    ("changes", "says"),
    [({"quota": 0}, "quota"), ({"completion_url": "ftp://x.org/done"}, "not an http(s) URL")],
)
def test_bad_input_on_the_links_page_says_why_and_writes_nothing(
    client_for, researcher, study, changes, says
):
    data = {"quota": 40, "completion_url": COMPLETION_URL, "completion_code": "C1", **changes}
    response = client_for(researcher).post(reverse("crowd:links", args=[study.slug]), data)
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not JoinLink.objects.exists()


@pytest.mark.parametrize("method", ["get", "post"])
def test_annotators_and_outsiders_may_not_make_or_close_links(
    client_for, annotator_a, outsider, study, make_link, method
):
    link, _ = make_link()
    for user in (annotator_a, outsider):
        client = client_for(user)
        for url in (reverse("crowd:links", args=[study.slug]), reverse("crowd:link_close", args=[link.pk])):
            assert getattr(client, method)(url, {"quota": 5}).status_code == 403
    assert JoinLink.objects.get().closed_at is None


def test_a_session_that_ends_mid_item_loses_no_label_the_link_brings_the_same_item_back(
    make_link, items, study
):
    _link, token = make_link(quota=3)
    client = Client()
    _enter(client, token, "sleepy")
    kept, _ = _label_one(client, study)
    screen = client.get(reverse("annotate:label_study", args=[study.slug]))
    pending = _shown_item_id(screen)
    client.cookies.clear()  # the session ended (expired, cookies cleared) before the key press
    url = reverse("annotate:label_submit", args=[study.slug, pending])
    response = client.post(url, {"answer_gender": "female", "request_id": _request_id(screen)}, **HTMX)
    assert response.status_code == 200  # htmx follows HX-Redirect to the login page
    assert response["HX-Redirect"].startswith("/accounts/login/")
    _enter(client, token, "sleepy")
    again = client.get(reverse("annotate:label_study", args=[study.slug]))
    assert _shown_item_id(again) == pending
    labelled, _ = _label_one(client, study, "female")
    assert labelled == pending
    mine = Label.objects.filter(annotator__crowd_participant__panel_id="sleepy")
    assert sorted(mine.values_list("item_id", flat=True)) == sorted([kept, pending])
