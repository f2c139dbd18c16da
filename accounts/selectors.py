"""Reads: token checks, login lockouts, the new account's password link."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import ApiToken, LoginFailure

_FINGERPRINT_SALT = "biaslab.accounts.ApiToken.password_fingerprint"


def key_digest(key: str) -> str:
    """The SHA-256 of a token key, as stored. Keys are random, so a fast hash is enough."""
    return hashlib.sha256(key.encode()).hexdigest()


def password_fingerprint(user: Any, *, secret: str | bytes | None = None) -> str:
    """A keyed hash of ``user``'s password hash: changes whenever the password does."""
    return salted_hmac(_FINGERPRINT_SALT, user.password, secret=secret, algorithm="sha256").hexdigest()


def token_lifetime() -> timedelta:
    """How long a token works after it was issued: BIASLAB_API_TOKEN_HOURS."""
    return timedelta(hours=settings.BIASLAB_API_TOKEN_HOURS)


def api_token_problem(*, token: ApiToken, now: datetime) -> str | None:
    """Why ``token`` may not authenticate at ``now`` (a sentence for the client), or ``None``."""
    user = token.user
    if not user.is_active:
        return "User inactive or deleted."
    if now >= token.created_at + token_lifetime():
        return "Token expired: POST username and password to /api/token/ for a new one."
    secrets = [None, *settings.SECRET_KEY_FALLBACKS]
    if not any(
        constant_time_compare(token.password_fingerprint, password_fingerprint(user, secret=s))
        for s in secrets
    ):
        return "Token revoked: the password changed since it was issued. POST to /api/token/ for a new one."
    return None


def login_lockout_seconds(*, username: str, address: str, now: datetime) -> int:
    """Seconds until ``username`` may try a password again from ``address``; 0 when it may now."""
    limit = settings.BIASLAB_LOGIN_LOCKOUT_ATTEMPTS
    if limit <= 0:
        return 0
    window = timedelta(minutes=settings.BIASLAB_LOGIN_LOCKOUT_MINUTES)
    recent = list(
        LoginFailure.objects.filter(
            username=lockout_username(username), address=address, created_at__gt=now - window
        )
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    if len(recent) < limit:
        return 0
    return max(1, math.ceil((recent[-1] + window - now).total_seconds()))


def lockout_username(username: str) -> str:
    """The username as the lockout counts it: case-folded, so ``Anna`` and ``anna`` share a count."""
    return username.casefold()[:150]


def password_set_path(user: Any) -> str:
    """The path of the one-time page where ``user`` sets a password (a password-reset token)."""
    return reverse(
        "password_set",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )


def password_set_days() -> int:
    """How many whole days a link of ``password_set_path`` works."""
    return max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)
