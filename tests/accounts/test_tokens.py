"""API tokens: the same URL and answers as before, but a lifetime, and revoked by a password
change or deactivation — checked when the token is used, with no hook on the change itself."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

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
    annotator_a.save()
    _refused(_get_studies(token), "User inactive or deleted.")
    assert APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD}).status_code == 400


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
