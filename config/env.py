"""Typed readers for settings that come from the environment. Every setting has a safe local default, except
the secret in production mode, which must be set explicitly (``env_production_secret``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """The variable's value; ``default`` when unset or empty."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}.")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}.") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` from a header line as the proxy sends it: ``X-Forwarded-Proto: https`` →
    ``("HTTP_X_FORWARDED_PROTO", "https")``; unset → ``None``. Raises ImproperlyConfigured for a value that is
    not ``Header-Name: value``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    header, sep, expected = value.partition(":")
    header, expected = header.strip(), expected.strip()
    if not sep or not header or not expected or " " in header:
        raise ImproperlyConfigured(
            f"{name} must read 'Header-Name: value', e.g. 'X-Forwarded-Proto: https'; got {value!r}."
        )
    return "HTTP_" + header.upper().replace("-", "_"), expected


_RATE_PERIODS = ("s", "m", "h", "d")  # what DRF's throttles read: the period's first letter


def env_rate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as ``60/minute`` (``N/second|minute|hour|day``); ``off`` → ``None``
    (no limit). Raises ImproperlyConfigured for anything else."""
    value = env_str(name, default).strip()
    if value.lower() in {"off", "none"}:
        return None
    count, sep, period = value.partition("/")
    if not sep or not count.isdigit() or not period or period[0].lower() not in _RATE_PERIODS:
        raise ImproperlyConfigured(f"{name} must be a rate like 60/minute (or off), got {value!r}.")
    return value


def env_cache(name: str, default: str) -> dict[str, str]:
    """One ``CACHES`` entry from a URL: ``locmem://`` (this process only), ``redis://host:6379/0``
    or ``rediss://…`` (Redis, shared), ``db://table`` (a database table made by
    ``manage.py createcachetable``, shared). Raises ImproperlyConfigured for another scheme."""
    url = env_str(name, default).strip()
    scheme, sep, rest = url.partition("://")
    if sep and scheme == "locmem":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": rest or "biaslab"}
    if sep and scheme in {"redis", "rediss"} and rest:
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    if sep and scheme == "db":
        return {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": rest or "biaslab_cache"}
    raise ImproperlyConfigured(
        f"{name} must be locmem://, redis://host:port/db, rediss://… or db://table; got {url!r}."
    )


#: Django's own bar for a production secret (``check --deploy``, security.W009): anything weaker
#: is refused at start-up rather than reported after the server is already running with it.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
_GENERATE_SECRET = 'python -c "import secrets; print(secrets.token_urlsafe(64))"'


def env_production_secret(name: str, *, known_insecure: tuple[str, ...] = ()) -> str:
    """The production secret from ``name``: set, strong by Django's deploy-check rules (at least 50
    characters, at least 5 different ones, no ``django-insecure-`` prefix) and none of ``known_insecure``
    (e.g. the development default written in this repository)."""
    value = os.environ.get(name, "")
    local_hint = "For local development set DJANGO_DEBUG=1 instead (bin/demo and bin/test do)."
    if not value:
        problem = f"{name} is not set"
    elif value in known_insecure:
        problem = f"{name} is the development key written in this repository"
    elif value.startswith("django-insecure-"):
        problem = f"{name} starts with 'django-insecure-' (a key made for development)"
    elif len(value) < SECRET_KEY_MIN_LENGTH:
        problem = f"{name} is too short ({len(value)} characters; at least {SECRET_KEY_MIN_LENGTH})"
    elif len(set(value)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        problem = f"{name} has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} different characters"
    else:
        return value
    raise ImproperlyConfigured(
        f"Refusing to start in production mode (DJANGO_DEBUG is off): {problem}. "
        f"Set it to a long random secret, e.g. the output of {_GENERATE_SECRET}. {local_hint}"
    )


def env_database(name: str, default: str, *, base_dir: Path, conn_max_age: int = 0) -> dict[str, Any]:
    """Django's ``DATABASES["default"]`` from a database URL (``dj_database_url``)."""
    import dj_database_url

    url = env_str(name, default)
    scheme, sep, rest = url.partition("://")
    if sep and scheme in {"sqlite", "spatialite"} and rest and not rest.startswith("/"):
        raise ImproperlyConfigured(
            f"{name} {url!r} names no database file (after sqlite:// comes the host, empty for "
            f"SQLite): write sqlite:///{rest} (relative to {base_dir}) or sqlite:////absolute/path."
        )
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=conn_max_age))
    except (ValueError, dj_database_url.UnknownSchemeError) as exc:
        # ParseError is a ValueError; the message of either names what is wrong, never the password.
        hint = str(exc).split(". Did you forget", 1)[0].rstrip(".")
        raise ImproperlyConfigured(
            f"{name} is not a database URL Django can use ({hint}); e.g. "
            "postgres://user:password@host:5432/name or sqlite:////absolute/path.sqlite3."
        ) from None
    db_name = str(config.get("NAME") or "")
    if config.get("ENGINE") == "django.db.backends.sqlite3" and db_name and db_name != ":memory:":
        path = Path(db_name)
        if not path.is_absolute():
            config["NAME"] = str(base_dir / path)
    return config
