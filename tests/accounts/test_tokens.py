"""API tokens: the same URL and answers as before, but a lifetime, and revoked by a password
change (checked when the token is used, with no hook on the change itself) or a deactivation
(the tokens are deleted, so a reactivation brings none back)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def _token(username: str = "anna", password: str = PASSWORD) -> str:
    response = APIClient().post("/api/token/", {"username": username, "password": password}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["token"]


def _get_studies(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/studies/")


def _refused(response, detail: str) -> None:
    """Refused with ``detail`` (a prefix of it). DRF answers 403, not 401, because session
    authentication comes first in the settings and sends no WWW-Authenticate challenge."""
    assert response.status_code in (401, 403)
    assert response.json()["detail"].startswith(detail)


def _age(token_key: str, age: timedelta) -> None:
    digest = hashlib.sha256(token_key.encode()).hexdigest()
    assert ApiToken.objects.filter(key_digest=digest).update(created_at=timezone.now() - age) == 1


def test_token_endpoint_keeps_its_url_and_answer_shape(annotator_a):
    as_form = APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD})
    assert as_form.status_code == 200
    assert list(as_form.json()) == ["token"]
    assert len(as_form.json()["token"]) == 40
    # Refusals come in the API's one error shape (config.api.ErrorOutput), DRF's messages inside.
    wrong = APIClient().post("/api/token/", {"username": "anna", "password": "nope"}, format="json")
    assert wrong.status_code == 400
    assert set(wrong.json()) == {"status", "code", "detail", "errors"}
    assert wrong.json()["status"] == 400
    assert wrong.json()["detail"] == "Unable to log in with provided credentials."
    assert wrong.json()["errors"] == {"non_field_errors": ["Unable to log in with provided credentials."]}
    missing = APIClient().post("/api/token/", {"username": "anna"}, format="json")
    assert missing.status_code == 400
    assert missing.json()["errors"] == {"password": ["This field is required."]}


def test_a_token_works_until_its_lifetime_is_over(annotator_a, settings):
    settings.BIASLAB_API_TOKEN_HOURS = 24
    token = _token()
    assert _get_studies(token).status_code == 200
    _age(token, timedelta(hours=23, minutes=59))
    assert _get_studies(token).status_code == 200
    _age(token, timedelta(hours=24, seconds=1))
    _refused(_get_studies(token), "Token expired")


def test_the_lifetime_comes_from_the_setting(annotator_a, settings):
    settings.BIASLAB_API_TOKEN_HOURS = 1
    token = _token()
    _age(token, timedelta(minutes=61))
    _refused(_get_studies(token), "Token expired")


def test_a_password_change_revokes_every_token_of_that_user_only(annotator_a, annotator_b):
    first, second, other = _token(), _token(), _token("ben")
    annotator_a.set_password("a-new-password-2")
    annotator_a.save()
    for token in (first, second):
        _refused(_get_studies(token), "Token revoked: the password changed")
    assert _get_studies(other).status_code == 200
    assert _get_studies(_token(password="a-new-password-2")).status_code == 200


def test_deactivating_an_account_revokes_its_tokens(annotator_a):
    token = _token()
    annotator_a.is_active = False
    annotator_a.save()  # no service, no admin: the database deletes the tokens
    _refused(_get_studies(token), "Invalid token.")
    assert not ApiToken.objects.filter(user=annotator_a).exists()
    assert APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD}).status_code == 400


def _reactivate(user) -> None:
    user.refresh_from_db()
    user.is_active = True
    user.save()


def test_a_deactivated_then_reactivated_account_s_old_tokens_stay_revoked(annotator_a, annotator_b):
    # Regression: the old token worked again after the account was reactivated.
    first, second, other = _token(), _token(), _token("ben")
    assert services.user_deactivate(user=annotator_a) == 2
    annotator_a.refresh_from_db()
    assert not annotator_a.is_active
    _refused(_get_studies(first), "Invalid token.")  # deleted, not merely refused
    _reactivate(annotator_a)
    for token in (first, second):
        _refused(_get_studies(token), "Invalid token.")
    assert _get_studies(other).status_code == 200
    assert _get_studies(_token()).status_code == 200  # a new token, asked for again


def _user_form(user, **changes) -> dict:
    """The admin's change form for ``user`` as the page would post it, with ``changes``."""
    joined = timezone.localtime(user.date_joined)
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on" if user.is_active else "",
        "is_staff": "on" if user.is_staff else "",
        "is_superuser": "on" if user.is_superuser else "",
        "groups": [g.pk for g in user.groups.all()],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": joined.strftime("%Y-%m-%d"),
        "date_joined_1": joined.strftime("%H:%M:%S"),
        **changes,
    }
    return {key: value for key, value in data.items() if value != ""}


def test_deactivating_on_the_admin_user_page_revokes_the_tokens(annotator_a, admin_user, client_for):
    token = _token()
    admin = client_for(admin_user)
    url = reverse("admin:auth_user_change", args=[annotator_a.pk])
    response = admin.post(url, _user_form(annotator_a, is_active=""), follow=True)
    assert response.status_code == 200
    assert "Deactivated anna: 1 API token(s) revoked." in response.content.decode()
    annotator_a.refresh_from_db()
    assert not annotator_a.is_active
    assert not ApiToken.objects.filter(user=annotator_a).exists()
    assert admin.post(url, _user_form(annotator_a, is_active="on")).status_code == 302
    annotator_a.refresh_from_db()
    assert annotator_a.is_active
    _refused(_get_studies(token), "Invalid token.")


def test_saving_an_active_user_in_the_admin_keeps_the_tokens(annotator_a, admin_user, client_for):
    token = _token()
    url = reverse("admin:auth_user_change", args=[annotator_a.pk])
    assert client_for(admin_user).post(url, _user_form(annotator_a, first_name="Anna")).status_code == 302
    assert _get_studies(token).status_code == 200


def test_the_admin_deactivate_action_revokes_the_tokens_of_the_selected_users_only(
    annotator_a, annotator_b, admin_user, client_for
):
    anna, ben = _token(), _token("ben")
    admin = client_for(admin_user)
    response = admin.post(
        reverse("admin:auth_user_changelist"),
        {"action": "deactivate_users", "_selected_action": [annotator_a.pk, admin_user.pk]},
        follow=True,
    )
    page = response.content.decode()
    assert "Deactivated anna: 1 API token(s) revoked." in page
    assert "You cannot deactivate your own account." in page
    admin_user.refresh_from_db()
    assert admin_user.is_active
    _reactivate(annotator_a)
    _refused(_get_studies(anna), "Invalid token.")
    assert _get_studies(ben).status_code == 200


def test_a_token_shown_while_its_account_is_inactive_is_deleted_for_good(annotator_a):
    # Where no trigger deleted the rows (here: they are put back by hand, as on a database
    # without one), the token check itself deletes them the first time one is tried.
    first, second = _token(), _token()
    tokens = list(ApiToken.objects.filter(user=annotator_a))
    annotator_a.is_active = False
    annotator_a.save()
    ApiToken.objects.bulk_create(tokens)
    _refused(_get_studies(first), "User inactive or deleted.")
    assert not ApiToken.objects.filter(user=annotator_a).exists()
    _reactivate(annotator_a)
    _refused(_get_studies(first), "Invalid token.")
    _refused(_get_studies(second), "Invalid token.")


def test_an_unknown_token_is_refused(annotator_a):
    _refused(_get_studies("0" * 40), "Invalid token.")


def test_only_the_keys_digest_is_stored(annotator_a):
    token = _token()
    row = ApiToken.objects.get()
    assert row.key_digest == hashlib.sha256(token.encode()).hexdigest()
    assert token not in {row.key_digest, row.password_fingerprint}
    assert annotator_a.password not in row.password_fingerprint


def test_a_new_token_prunes_the_users_expired_ones_and_keeps_live_ones(annotator_a, settings):
    settings.BIASLAB_API_TOKEN_HOURS = 1
    expired, live = _token(), _token()
    _age(expired, timedelta(hours=2))
    newest = _token()
    assert ApiToken.objects.count() == 2
    assert _get_studies(live).status_code == 200
    assert _get_studies(newest).status_code == 200


def test_a_stale_token_in_the_header_does_not_block_asking_for_a_new_one(annotator_a, settings):
    settings.BIASLAB_API_TOKEN_HOURS = 1
    stale = _token()
    _age(stale, timedelta(hours=2))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {stale}")
    response = client.post("/api/token/", {"username": "anna", "password": PASSWORD})
    assert response.status_code == 200


def test_rotating_the_secret_key_keeps_tokens_only_while_the_old_key_is_a_fallback(annotator_a, settings):
    token = _token()
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-secret-key-for-this-test-only-0123456789-abcdefghij"
    settings.SECRET_KEY_FALLBACKS = [old]
    assert _get_studies(token).status_code == 200
    settings.SECRET_KEY_FALLBACKS = []
    _refused(_get_studies(token), "Token revoked")


def test_session_authentication_still_works_beside_tokens(annotator_a, client_for):
    assert client_for(annotator_a).get("/api/studies/").status_code == 200


@pytest.mark.parametrize("how", ["queryset update", "SQL"])
def test_a_deactivation_by_queryset_update_or_sql_revokes_the_tokens_for_good(annotator_a, how):
    # No signal, no save(), no token shown while the account is inactive: the database itself
    # deletes the tokens as is_active goes false, so the reactivation brings none back.
    token = _token()
    if how == "SQL":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE auth_user SET is_active = %s WHERE id = %s", [False, annotator_a.pk])
    else:
        User.objects.filter(pk=annotator_a.pk).update(is_active=False)
    User.objects.filter(pk=annotator_a.pk).update(is_active=True)
    _refused(_get_studies(token), "Invalid token.")
    assert _get_studies(_token()).status_code == 200  # a new token works


def test_updates_that_leave_is_active_alone_keep_the_tokens(annotator_a):
    token = _token()
    User.objects.filter(pk=annotator_a.pk).update(first_name="Anna", is_active=True)
    assert _get_studies(token).status_code == 200
