"""Production mode from the environment: DEBUG off by default, no start without a strong secret,
HTTPS and cookie switches settable, and Django's deploy checks clean for a real configuration.

Settings are read once per process, so each configuration runs in a fresh ``manage.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.env import env_production_secret, env_proxy_ssl_header

STRONG_SECRET = "k3Jx9-PqZr7vT2mWb8YcL5nH0dGf4sAe6uRi1oKpXwVzQyNt_BjCl"  # 53 characters, many distinct
PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": STRONG_SECRET,
    "DJANGO_ALLOWED_HOSTS": "biaslab.example.org",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://biaslab.example.org",
    "BIASLAB_CACHE_URL": "redis://127.0.0.1:6379/1",
}
PRINT_SETTINGS = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({name: getattr(s, name) for name in (
    "DEBUG", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD", "CSRF_TRUSTED_ORIGINS", "BIASLAB_CSP", "BIASLAB_CSP_REPORT_ONLY")}))
"""


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python args`` in the repository with config.settings and only ``env`` configured: no
    DJANGO_* or BIASLAB_* variable (nor a DATABASE_URL) leaks in from the caller's shell."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "BIASLAB_")) and key != "DATABASE_URL"
    }
    clean.update(DJANGO_SETTINGS_MODULE="config.settings", BIASLAB_VAR_DIR=str(tmp_path / "var"), **env)
    return subprocess.run(
        [sys.executable, *args], cwd=settings.BASE_DIR, env=clean, capture_output=True, text=True, timeout=120
    )


@pytest.mark.subprocess
def test_debug_is_off_and_the_server_refuses_to_start_without_a_secret(tmp_path):
    result = _run(["manage.py", "check"], tmp_path)  # no DJANGO_DEBUG, no DJANGO_SECRET_KEY
    assert result.returncode != 0
    assert "Refusing to start in production mode (DJANGO_DEBUG is off)" in result.stderr
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
    assert "secrets.token_urlsafe" in result.stderr  # how to make one
    # One clear message for a person, not a traceback.
    assert "Traceback" not in result.stderr
    assert "export DJANGO_DEBUG=1" in result.stderr


@pytest.mark.subprocess
def test_the_development_key_written_in_the_repository_is_refused_in_production(tmp_path):
    result = _run(
        ["manage.py", "check"],
        tmp_path,
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=settings.DEVELOPMENT_SECRET_KEY,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is the development key written in this repository" in result.stderr


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("short-but-random-Xy12", "too short (21 characters; at least 50)"),
        ("django-insecure-" + "abcdefghij" * 5, "starts with 'django-insecure-'"),
        ("ab" * 30, "fewer than 5 different characters"),
    ],
)
def test_a_weak_secret_is_refused_with_the_reason(monkeypatch, secret, reason):
    monkeypatch.setenv("DJANGO_SECRET_KEY", secret)
    with pytest.raises(ImproperlyConfigured, match="Refusing to start") as raised:
        env_production_secret("DJANGO_SECRET_KEY")
    assert reason in str(raised.value)


def test_a_strong_secret_is_accepted(monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", STRONG_SECRET)
    assert env_production_secret("DJANGO_SECRET_KEY", known_insecure=("other",)) == STRONG_SECRET


@pytest.mark.subprocess
def test_production_defaults_are_https_only_and_every_switch_comes_from_the_environment(tmp_path):
    defaults = _run(["-c", PRINT_SETTINGS], tmp_path, DJANGO_SECRET_KEY=STRONG_SECRET)
    assert defaults.returncode == 0, defaults.stderr
    values = json.loads(defaults.stdout)
    assert values["DEBUG"] is False
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SESSION_COOKIE_SECURE"] is values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_HSTS_SECONDS"] == 0  # sticky in browsers: an explicit choice
    assert "script-src 'self'" in values["BIASLAB_CSP"]

    configured = _run(
        ["-c", PRINT_SETTINGS],
        tmp_path,
        **PRODUCTION,
        DJANGO_SECURE_SSL_REDIRECT="0",
        DJANGO_SECURE_COOKIES="0",
        BIASLAB_CSP="default-src 'none'",
        BIASLAB_CSP_REPORT_ONLY="1",
    )
    assert configured.returncode == 0, configured.stderr
    values = json.loads(configured.stdout)
    assert values["SECURE_SSL_REDIRECT"] is values["SESSION_COOKIE_SECURE"] is False
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["SECURE_HSTS_SECONDS"] == 31536000
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is values["SECURE_HSTS_PRELOAD"] is True
    assert values["CSRF_TRUSTED_ORIGINS"] == ["https://biaslab.example.org"]
    assert values["BIASLAB_CSP"] == "default-src 'none'"
    assert values["BIASLAB_CSP_REPORT_ONLY"] is True


@pytest.mark.subprocess
def test_deploy_checks_are_clean_for_a_production_environment(tmp_path):
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path, **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


@pytest.mark.subprocess
def test_deploy_checks_warn_about_what_is_still_missing(tmp_path):
    # The same command can fail: without HSTS Django's own check says so.
    env = {**PRODUCTION, "DJANGO_SECURE_HSTS_SECONDS": "0"}
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path, **env)
    assert result.returncode != 0
    assert "security.W004" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("X-Forwarded-Proto: https", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("  X-Forwarded-Ssl:on ", ("HTTP_X_FORWARDED_SSL", "on")),
        ("", None),
    ],
)
def test_proxy_ssl_header_is_written_as_the_proxy_sends_it(monkeypatch, value, expected):
    monkeypatch.setenv("DJANGO_SECURE_PROXY_SSL_HEADER", value)
    assert env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER") == expected


@pytest.mark.parametrize("value", ["https", "X-Forwarded-Proto:", "X Forwarded Proto: https"])
def test_a_malformed_proxy_ssl_header_is_refused(monkeypatch, value):
    monkeypatch.setenv("DJANGO_SECURE_PROXY_SSL_HEADER", value)
    with pytest.raises(ImproperlyConfigured, match="X-Forwarded-Proto: https"):
        env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")


SESSION_ENGINE = "from django.conf import settings; print(settings.SESSION_ENGINE)"


@pytest.mark.subprocess
def test_sessions_are_read_from_redis_when_a_shared_redis_cache_is_configured(tmp_path):
    with_redis = _run(
        ["-c", SESSION_ENGINE], tmp_path, DJANGO_DEBUG="1", BIASLAB_CACHE_URL="redis://127.0.0.1:6379/1"
    )
    assert with_redis.stdout.strip() == "django.contrib.sessions.backends.cached_db", with_redis.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("cache_url", ["", "locmem://", "db://biaslab_cache"])
def test_sessions_stay_in_the_database_without_redis(tmp_path, cache_url):
    env = {"DJANGO_DEBUG": "1"} | ({"BIASLAB_CACHE_URL": cache_url} if cache_url else {})
    result = _run(["-c", SESSION_ENGINE], tmp_path, **env)
    assert result.stdout.strip() == "django.contrib.sessions.backends.db", result.stderr
