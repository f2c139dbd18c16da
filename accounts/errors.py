"""What the account services refuse, in the user's words."""

from __future__ import annotations

import math


class AccountsError(Exception):
    """Base of the errors the account services raise."""


class InvalidCredentials(AccountsError):
    """The username and password do not match an active account."""


class LoginLockedOut(AccountsError):
    """Too many failed logins for this username from this address: wait ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        minutes = max(1, math.ceil(retry_after / 60))
        super().__init__(
            "Too many failed logins for this account from your address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}, or ask an admin to unlock it."
        )
