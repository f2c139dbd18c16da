"""``add_annotators`` and the annotators page's form: new accounts come with a one-time link to
set a password; researchers and admins only on purpose; only researchers and admins may add."""

from __future__ import annotations

import html
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from tests.factories import PASSWORD, StudyFactory

pytestmark = pytest.mark.django_db
User = get_user_model()
LINK = re.compile(r"(https?://[^\s\"<]+/accounts/set-password/[^\s\"<]+/)")
VERBS = ("get", "post", "put", "patch", "delete", "head", "options")


@pytest.fixture
def team_study():
    return StudyFactory(slug="team", name="Team study")


def _add(*args: str, **options) -> str:
    out = io.StringIO()
    call_command("add_annotators", *args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def _set_password(link: str, password: str) -> Client:
    """Open the link as its owner would and set the password; the client that did it."""
    client = Client()
    path = link.split("://", 1)[1].partition("/")[2]
    opened = client.get(f"/{path}", follow=True)
    assert opened.status_code == 200
    assert b"Set your password" in opened.content
    form_url = opened.redirect_chain[-1][0]
    done = client.post(form_url, {"new_password1": password, "new_password2": password}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("password_set_done")
    return client


# --- the command ------------------------------------------------------------------------------------


def test_the_command_creates_annotators_and_prints_a_link_that_sets_a_password_once(team_study, settings):
    settings.BIASLAB_BASE_URL = "https://lab.example.org/"
    out = _add("alice", "bob", study="team")
    links = dict(
        re.findall(
            r"^(\w+): new account.*?(https://lab\.example\.org/accounts/set-password/\S+/)$", out, re.M
        )
    )
    assert set(links) == {"alice", "bob"}
    assert links["alice"] != links["bob"]
    assert set(team_study.annotators.values_list("username", flat=True)) == {"alice", "bob"}
    _set_password(links["alice"], "a-long-new-password-7")
    assert Client().login(username="alice", password="a-long-new-password-7")
    # Once: the link no longer works after the password is set.
    again = Client().get(links["alice"].split("lab.example.org", 1)[1], follow=True)
    assert b"does not work any more" in again.content


def test_a_second_run_changes_nothing_and_says_so(team_study):
    _add("alice", study="team")
    out = _add("alice", study="team")
    assert "alice: already an annotator of 'team'; no change" in out
    assert "Nothing changed." in out
    assert "set-password" not in out
    assert User.objects.filter(username="alice").count() == 1


def test_base_url_option_wins_over_the_setting(team_study):
    out = _add("alice", study="team", base_url="http://10.0.0.5:8000")
    assert LINK.search(out).group(1).startswith("http://10.0.0.5:8000/accounts/set-password/")


def test_the_command_refuses_a_researcher_by_name_unless_allow_staff(team_study, researcher):
    with pytest.raises(CommandError, match=r"'rita' is a researcher: not added .*--allow-staff"):
        _add("alice", "rita", study="team")
    assert not User.objects.filter(username="alice").exists()
    out = _add("alice", "rita", study="team", allow_staff=True)
    assert "rita: existing account, now an annotator of 'team'" in out
    # An annotator of the study: a member of its annotators.
    assert team_study.annotators.filter(username="rita").exists()


def test_the_command_refuses_invalid_usernames_in_one_line_and_writes_nothing(team_study):
    with pytest.raises(CommandError) as refused:
        _add("alice", "no spaces", study="team")
    assert "\n" not in str(refused.value)
    assert "invalid username: 'no spaces'" in str(refused.value)
    assert not User.objects.filter(username="alice").exists()


def test_the_command_refuses_a_base_url_that_is_not_http(team_study):
    with pytest.raises(CommandError, match="not an http"):
        _add("alice", study="team", base_url="lab.example.org")
    assert not User.objects.filter(username="alice").exists()


# --- the form on the annotators page ---------------------------------------------------------------


def _url(study) -> str:
    return reverse("annotate:annotators_add", args=[study.slug])


@pytest.mark.parametrize("persona", ["researcher", "admin_user"])
def test_a_researcher_adds_annotators_with_htmx_and_sees_the_links_once(
    request, client_for, persona, team_study
):
    client = client_for(request.getfixturevalue(persona))
    page = client.get(reverse("annotate:annotator_stats", args=[team_study.slug]))
    assert f'hx-post="{_url(team_study)}"'.encode() in page.content
    response = client.post(_url(team_study), {"usernames": "alice, bob\ncarol"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page_part = response.content.decode()
    assert "<html" not in page_part  # the form's region only
    links = LINK.findall(page_part)
    assert len(links) == 3
    assert links[0].startswith("http://testserver/accounts/set-password/")
    assert set(team_study.annotators.values_list("username", flat=True)) == {"alice", "bob", "carol"}
    later = client.get(reverse("annotate:annotator_stats", args=[team_study.slug]))
    assert not LINK.search(later.content.decode())
    again = client.post(_url(team_study), {"usernames": "alice"}, HTTP_HX_REQUEST="true")
    assert "already an annotator of this study; no change" in again.content.decode()
    _set_password(links[1], "another-long-password-3")


def test_the_form_works_without_htmx_as_a_whole_page(client_for, researcher, team_study):
    response = client_for(researcher).post(_url(team_study), {"usernames": "alice"})
    assert response.status_code == 200
    assert b"<html" in response.content
    assert LINK.search(response.content.decode())


def test_the_form_refuses_staff_and_invalid_names_saying_why_and_writes_nothing(
    client_for, researcher, admin_user, team_study
):
    client = client_for(researcher)
    refused = client.post(_url(team_study), {"usernames": "alice adam"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400
    assert "'adam' is an admin: not added" in html.unescape(refused.content.decode())
    invalid = client.post(_url(team_study), {"usernames": "alice b@d!"}, HTTP_HX_REQUEST="true")
    assert invalid.status_code == 400
    assert "invalid username: 'b@d!'" in html.unescape(invalid.content.decode())
    assert not User.objects.filter(username="alice").exists()
    allowed = client.post(
        _url(team_study), {"usernames": "adam", "allow_staff": "on"}, HTTP_HX_REQUEST="true"
    )
    assert allowed.status_code == 200
    assert set(team_study.annotators.values_list("username", flat=True)) == {"adam"}


@pytest.mark.parametrize("persona", ["annotator_a", "outsider"])
def test_annotators_and_users_without_a_role_cannot_add_with_any_verb(request, persona, team_study):
    user = request.getfixturevalue(persona)
    team_study.annotators.add(user)
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    for verb in VERBS:
        response = getattr(client, verb)(_url(team_study), {"usernames": "alice"} if verb == "post" else None)
        assert response.status_code == 403, verb
    assert not User.objects.filter(username="alice").exists()


def test_anonymous_visitors_are_sent_to_login_and_nothing_is_written(client, team_study):
    for verb in VERBS:
        response = getattr(client, verb)(_url(team_study), {"usernames": "alice"} if verb == "post" else None)
        assert response.status_code == 302, verb
        assert response["Location"].startswith(reverse("login"))
    assert not User.objects.filter(username="alice").exists()
