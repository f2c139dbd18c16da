"""Brute force on passwords: after BIASLAB_LOGIN_LOCKOUT_ATTEMPTS failures for one username
from one address within BIASLAB_LOGIN_LOCKOUT_MINUTES, that pair is refused — on the login page
and on POST /api/token/ alike, counted in the database so every server process agrees."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import LoginFailure
from tests.factories import PASSWORD

pytestmark = pytest.mark.django_db


def _login(client: Client, password: str, username: str = "anna", **extra):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def _token(password: str, username: str = "anna", **extra):
    return APIClient().post("/api/token/", {"username": username, "password": password}, **extra)


@pytest.fixture
def lockout(settings):
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 5
    settings.BIASLAB_LOGIN_LOCKOUT_MINUTES = 15


def test_the_login_page_locks_a_username_out_after_repeated_failures(annotator_a, lockout):
    client = Client()
    for _ in range(5):
        response = _login(client, "wrong")
        assert response.status_code == 200
        assert b"did not match" in response.content
    locked = _login(client, PASSWORD)  # even the right password, now
    assert locked.status_code == 429
    assert 890 <= int(locked["Retry-After"]) <= 900
    page = locked.content.decode()
    assert "Too many failed logins for this account from your address." in page
    assert "Try again in 15 minutes" in page
    assert "_auth_user_id" not in client.session


def test_the_lockout_ends_when_the_failures_are_older_than_the_window(annotator_a, lockout):
    client = Client()
    for _ in range(5):
        _login(client, "wrong")
    assert _login(client, PASSWORD).status_code == 429
    LoginFailure.objects.update(created_at=timezone.now() - timedelta(minutes=15, seconds=1))
    assert _login(client, PASSWORD).status_code == 302  # logged in
    assert not LoginFailure.objects.filter(username="anna").exists()  # a success clears the count


def test_the_token_api_and_the_login_page_share_one_count(annotator_a, lockout):
    for _ in range(3):
        _login(Client(), "wrong")
    for _ in range(2):
        assert _token("wrong").status_code == 400
    response = _token(PASSWORD)
    assert response.status_code == 429
    assert response.json()["detail"].startswith("Too many failed logins for this account")
    assert int(response["Retry-After"]) > 0
    assert _login(Client(), PASSWORD).status_code == 429


def test_the_username_is_counted_case_insensitively(annotator_a, lockout):
    for name in ("anna", "ANNA", "Anna", "aNNa", "annA"):
        _login(Client(), "wrong", username=name)
    assert _login(Client(), PASSWORD).status_code == 429


def test_another_address_and_another_username_are_not_locked_out(annotator_a, annotator_b, lockout):
    for _ in range(5):
        _login(Client(), "wrong")
    assert _login(Client(), PASSWORD, REMOTE_ADDR="10.0.0.7").status_code == 302
    assert _login(Client(), PASSWORD, username="ben").status_code == 302


def test_a_forged_x_forwarded_for_does_not_escape_the_lockout(annotator_a, lockout):
    for n in range(5):
        _login(Client(), "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
    assert _login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 429


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client(annotator_a, lockout, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for _ in range(5):
        _login(Client(), "wrong", HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert _login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 429
    assert _login(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.2").status_code == 302


def test_the_count_lives_in_the_database_not_in_a_per_process_cache(annotator_a, lockout, settings):
    # No cache at all: a counter kept in (per-process) memory or the cache would never lock.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    for _ in range(5):
        _login(Client(), "wrong")
    assert LoginFailure.objects.filter(username="anna", address="127.0.0.1").count() == 5
    assert _login(Client(), PASSWORD).status_code == 429


def test_a_success_before_the_limit_starts_the_count_again(annotator_a, lockout):
    for _ in range(4):
        _login(Client(), "wrong")
    assert _login(Client(), PASSWORD).status_code == 302
    for _ in range(4):
        _login(Client(), "wrong")
    assert _login(Client(), PASSWORD).status_code == 302


def test_attempts_and_minutes_come_from_the_settings(annotator_a, settings):
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 2
    settings.BIASLAB_LOGIN_LOCKOUT_MINUTES = 1
    for _ in range(2):
        _login(Client(), "wrong")
    response = _login(Client(), PASSWORD)
    assert response.status_code == 429
    assert "Try again in 1 minute," in response.content.decode()
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 0  # off
    assert _login(Client(), PASSWORD).status_code == 302


def test_old_failures_are_pruned_when_a_new_one_is_recorded(annotator_a, lockout):
    _login(Client(), "wrong")
    LoginFailure.objects.update(created_at=timezone.now() - timedelta(hours=1))
    _login(Client(), "wrong", username="ben")
    assert list(LoginFailure.objects.values_list("username", flat=True)) == ["ben"]
