"""Writes: check a password (counting failures), issue and revoke API tokens, deactivate an account."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate
from django.db import transaction
from django.utils import timezone

from accounts import selectors
from accounts.errors import InvalidCredentials, LoginLockedOut
from accounts.models import ApiToken, LoginFailure


def credentials_check(*, request: Any, username: str, password: str, address: str) -> Any:
    """The active user with these credentials, counting failures (login page and token API alike)."""
    now = timezone.now()
    wait = selectors.login_lockout_seconds(username=username, address=address, now=now)
    if wait:
        raise LoginLockedOut(wait)
    user = authenticate(request, username=username, password=password)
    key = selectors.lockout_username(username)
    if user is None:
        with transaction.atomic():
            window = timedelta(minutes=settings.BIASLAB_LOGIN_LOCKOUT_MINUTES)
            # Old rows count for nothing any more; pruning here keeps the table small.
            LoginFailure.objects.filter(created_at__lte=now - window).delete()
            LoginFailure.objects.create(username=key, address=address[:64], created_at=now)
        raise InvalidCredentials("Unable to log in with provided credentials.")
    LoginFailure.objects.filter(username=key, address=address[:64]).delete()
    return user


def api_token_create(*, user: Any) -> str:
    """Issue a new API token for ``user`` and return its key — the only time the key exists in clear."""
    key = secrets.token_hex(20)
    now = timezone.now()
    with transaction.atomic():
        ApiToken.objects.filter(user=user, created_at__lte=now - selectors.token_lifetime()).delete()
        ApiToken.objects.create(
            user=user,
            key_digest=selectors.key_digest(key),
            password_fingerprint=selectors.password_fingerprint(user),
            created_at=now,
        )
    return key


def api_tokens_revoke(*, user: Any) -> int:
    """Delete every API token of ``user``; how many there were."""
    deleted, _ = ApiToken.objects.filter(user=user).delete()
    return deleted


def user_deactivate(*, user: Any) -> int:
    """Deactivate ``user``'s account and revoke its API tokens; how many were revoked."""
    with transaction.atomic():
        # Counted first: the database deletes them as is_active goes false (accounts/migrations/0003).
        revoked = ApiToken.objects.filter(user=user).count()
        user.is_active = False
        user.save(update_fields=["is_active"])
        api_tokens_revoke(user=user)
        return revoked
