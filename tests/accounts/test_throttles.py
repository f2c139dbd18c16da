"""API rate limits: per user and per address, rates from the environment, counts in the cache
named by BIASLAB_CACHE_URL — shared by server processes when that cache is shared."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts.checks import throttle_cache_is_shared
from config.env import env_cache, env_rate
from tests.factories import PASSWORD


def _rates(settings, **rates: str | None) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates},
    }


@pytest.mark.django_db
def test_api_requests_are_limited_per_user_at_the_configured_rate(annotator_a, annotator_b, settings):
    _rates(settings, user="3/minute")
    anna, ben = APIClient(), APIClient()
    anna.login(username="anna", password=PASSWORD)
    ben.login(username="ben", password=PASSWORD)
    assert [anna.get("/api/studies/").status_code for _ in range(3)] == [200] * 3
    refused = anna.get("/api/studies/")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert ben.get("/api/studies/").status_code == 200  # per user


@pytest.mark.django_db
def test_password_checks_on_the_token_api_are_limited_per_address(annotator_a, settings):
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 0  # only the rate limit here, not the lockout
    _rates(settings, login="3/minute")
    codes = [
        APIClient().post("/api/token/", {"username": f"guess{n}", "password": "x"}).status_code
        for n in range(3)
    ]
    assert codes == [400, 400, 400]
    assert APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD}).status_code == 429
    other = APIClient().post(
        "/api/token/", {"username": "anna", "password": PASSWORD}, REMOTE_ADDR="10.0.0.8"
    )
    assert other.status_code == 200


def _page_login(username: str, password: str, **extra):
    return Client().post(reverse("login"), {"username": username, "password": password}, **extra)


@pytest.mark.django_db
def test_the_login_page_limits_password_checks_per_address_whoever_is_named(annotator_a, settings):
    # Regression: 30 usernames x 1 password from one address all answered 200.
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 0  # only the rate limit here, not the lockout
    _rates(settings, login="3/minute")
    assert [_page_login(f"guess{n}", "x").status_code for n in range(3)] == [200, 200, 200]
    refused = _page_login("anna", PASSWORD)  # even the right password, now
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    page = refused.content.decode()
    assert "Too many login attempts from your address. Try again in " in page
    assert f"Try again in {refused['Retry-After']} second" in page
    assert '<form method="post"' in page  # the page, with its form, to try again later
    assert "_auth_user_id" not in refused.wsgi_request.session
    assert _page_login("anna", PASSWORD, REMOTE_ADDR="10.0.0.8").status_code == 302  # per address


@pytest.mark.django_db
def test_a_refused_login_checks_no_password(annotator_a, settings, monkeypatch):
    _rates(settings, login="1/minute")
    assert _page_login("anna", "wrong").status_code == 200
    checked = []
    monkeypatch.setattr("accounts.services.authenticate", lambda *a, **k: checked.append(k))
    assert _page_login("anna", PASSWORD).status_code == 429
    assert checked == []


@pytest.mark.django_db
def test_the_login_page_and_the_token_api_share_one_count_per_address(annotator_a, settings):
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 0
    _rates(settings, login="4/minute")
    assert APIClient().post("/api/token/", {"username": "a", "password": "x"}).status_code == 400
    assert APIClient().post("/api/token/", {"username": "b", "password": "x"}).status_code == 400
    assert _page_login("c", "x").status_code == 200
    assert _page_login("d", "x").status_code == 200
    assert _page_login("anna", PASSWORD).status_code == 429
    assert APIClient().post("/api/token/", {"username": "anna", "password": PASSWORD}).status_code == 429


@pytest.mark.django_db
def test_showing_the_login_page_is_not_a_password_check(annotator_a, settings):
    _rates(settings, login="2/minute")
    assert {Client().get(reverse("login")).status_code for _ in range(5)} == {200}
    assert _page_login("anna", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_login_page_limit_is_off_with_the_api_s(annotator_a, settings):
    settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = 0
    _rates(settings, login=None)
    assert {_page_login(f"guess{n}", "x").status_code for n in range(30)} == {200}


@pytest.mark.django_db
def test_a_rate_set_to_off_is_no_limit(annotator_a, settings):
    _rates(settings, user=None)
    client = APIClient()
    client.login(username="anna", password=PASSWORD)
    assert {client.get("/api/studies/").status_code for _ in range(20)} == {200}


@pytest.mark.parametrize(
    ("value", "expected"), [("60/minute", "60/minute"), ("1000/h", "1000/h"), ("off", None), ("OFF", None)]
)
def test_rates_are_read_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("BIASLAB_API_THROTTLE_USER", value)
    assert env_rate("BIASLAB_API_THROTTLE_USER", "1/second") == expected


@pytest.mark.parametrize("value", ["60", "sixty/minute", "60/fortnight", "/minute"])
def test_a_malformed_rate_is_refused(monkeypatch, value):
    monkeypatch.setenv("BIASLAB_API_THROTTLE_USER", value)
    with pytest.raises(ImproperlyConfigured, match="BIASLAB_API_THROTTLE_USER must be a rate like 60/minute"):
        env_rate("BIASLAB_API_THROTTLE_USER", "1/second")


@pytest.mark.parametrize(
    ("url", "backend", "location"),
    [
        ("locmem://", "locmem.LocMemCache", "biaslab"),
        ("redis://127.0.0.1:6379/2", "redis.RedisCache", "redis://127.0.0.1:6379/2"),
        ("rediss://cache.internal:6380/0", "redis.RedisCache", "rediss://cache.internal:6380/0"),
        ("db://my_cache", "db.DatabaseCache", "my_cache"),
        ("db://", "db.DatabaseCache", "biaslab_cache"),
    ],
)
def test_the_cache_comes_from_a_url(monkeypatch, url, backend, location):
    monkeypatch.setenv("BIASLAB_CACHE_URL", url)
    config = env_cache("BIASLAB_CACHE_URL", "locmem://")
    assert config == {"BACKEND": f"django.core.cache.backends.{backend}", "LOCATION": location}


@pytest.mark.parametrize("url", ["memcached://x", "redis://", "127.0.0.1:6379"])
def test_an_unknown_cache_url_is_refused(monkeypatch, url):
    monkeypatch.setenv("BIASLAB_CACHE_URL", url)
    with pytest.raises(ImproperlyConfigured, match="BIASLAB_CACHE_URL must be"):
        env_cache("BIASLAB_CACHE_URL", "locmem://")


def test_the_deploy_check_warns_that_a_local_memory_cache_counts_per_process(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    (warning,) = throttle_cache_is_shared(None)
    assert isinstance(warning, Warning)
    assert warning.id == "accounts.W001"
    assert "BIASLAB_CACHE_URL" in warning.hint
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "x"}}
    assert throttle_cache_is_shared(None) == []


# --- several server processes --------------------------------------------------------------------

# One "server process": Django started afresh, two requests to the token API. They hold no
# credentials (400 without a password check: no hashing, no database), yet the login rate
# limit counts them, as it counts every request to that endpoint.
TWO_TOKEN_REQUESTS = """
import json, django
django.setup()
from django.test import Client
print(json.dumps([Client().post("/api/token/", {}).status_code for n in range(2)]))
"""


def _redis_up() -> bool:
    try:
        import redis  # noqa: F401
    except ImportError:
        return False
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def process_env(tmp_path_factory) -> dict[str, str]:
    """An SQLite file holding the db:// cache table, which separate processes share."""
    folder = tmp_path_factory.mktemp("processes")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "BIASLAB_")) and key != "DATABASE_URL"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="1",
        BIASLAB_VAR_DIR=str(folder),
        DATABASE_URL=f"sqlite:///{folder / 'shared.sqlite3'}",
        BIASLAB_API_THROTTLE_LOGIN="3/minute",
    )
    subprocess.run(
        [sys.executable, "manage.py", "createcachetable", "shared_cache"],
        cwd=django_settings.BASE_DIR,
        env=env,
        check=True,
        timeout=120,
    )
    return env


def _process(env: dict[str, str], cache_url: str, prefix: str) -> list[int]:
    result = subprocess.run(
        [sys.executable, "-c", TWO_TOKEN_REQUESTS],
        cwd=Path(django_settings.BASE_DIR),
        env={**env, "BIASLAB_CACHE_URL": cache_url, "BIASLAB_CACHE_KEY_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("cache_url", "shared"),
    [
        ("locmem://", False),
        ("db://shared_cache", True),
        pytest.param(
            "redis://127.0.0.1:6379/0",
            True,
            marks=pytest.mark.skipif(
                not _redis_up(), reason="no Redis on 127.0.0.1:6379 or no redis package"
            ),
        ),
    ],
)
def test_several_server_processes_share_the_limit_through_a_shared_cache(process_env, cache_url, shared):
    prefix = f"test-{uuid.uuid4().hex}"  # this run's keys only, in a Redis others may use
    assert _process(process_env, cache_url, prefix) == [400, 400]
    second = _process(process_env, cache_url, prefix)
    # With a rate of 3/minute the fourth request is refused — only if the count was shared.
    assert second == ([400, 429] if shared else [400, 400])
