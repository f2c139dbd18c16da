"""What the account services refuse, in the user's words."""

from __future__ import annotations

import math


class InvalidCredentials(Exception):
    """The username and password do not match an active account."""


class LoginLockedOut(Exception):
    """Too many failed logins for this username from this address: wait ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        minutes = max(1, math.ceil(retry_after / 60))
        super().__init__(
            "Too many failed logins for this account from your address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}, or ask an admin to unlock it."
        )


class LoginThrottled(Exception):
    """Too many password checks from this address: wait ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        if retry_after < 120:
            wait = f"{retry_after} second{'s' if retry_after != 1 else ''}"
        else:
            wait = f"{math.ceil(retry_after / 60)} minutes"
        super().__init__(f"Too many login attempts from your address. Try again in {wait}.")
