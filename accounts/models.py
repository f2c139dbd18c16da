"""API tokens with a lifetime, and the failed logins that lock an account out for a while."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A key a script sends as ``Authorization: Token <key>``; only its SHA-256 is kept."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        help_text="The account the token acts as, with that account's roles.",
        db_index=False,  # the (user, created_at) index leads with it
    )
    key_digest = models.CharField(
        max_length=64,
        unique=True,
        help_text="SHA-256 of the key, in hex. The key itself is never stored.",
    )
    password_fingerprint = models.CharField(
        max_length=64,
        help_text=(
            "A keyed hash of the account's password hash when the token was issued; once the "
            "password changes it no longer matches and the token stops working."
        ),
    )
    created_at = models.DateTimeField(
        default=timezone.now,
        help_text="When the token was issued; it works for BIASLAB_API_TOKEN_HOURS from then.",
    )

    class Meta:
        verbose_name = "API token"
        indexes = [models.Index(fields=["user", "created_at"])]

    def __str__(self) -> str:
        return f"API token of {self.user} issued {self.created_at:%Y-%m-%d %H:%M}"


class LoginFailure(models.Model):
    """One failed password check, counted for the lockout of a (username, address) pair."""

    username = models.CharField(
        max_length=150,
        help_text="The username that was tried, case-folded (it need not exist).",
    )
    address = models.CharField(
        max_length=64,
        help_text="The client address the attempt came from (see BIASLAB_NUM_PROXIES).",
    )
    created_at = models.DateTimeField(default=timezone.now, help_text="When the attempt failed.")

    class Meta:
        verbose_name = "failed login"
        indexes = [
            models.Index(fields=["username", "address", "created_at"]),
            models.Index(fields=["created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"
