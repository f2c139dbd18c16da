"""The login form, with the lockout."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from accounts import services
from accounts.errors import InvalidCredentials, LoginLockedOut
from accounts.throttles import client_address


class LockoutAuthenticationForm(AuthenticationForm):
    """Django's login form, checking the password through ``services.credentials_check``."""

    locked_out: LoginLockedOut | None = None

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            try:
                self.user_cache = services.credentials_check(
                    request=self.request,
                    username=username,
                    password=password,
                    address=client_address(self.request),
                )
            except LoginLockedOut as locked:
                self.locked_out = locked
                raise ValidationError(str(locked), code="locked_out") from locked
            except InvalidCredentials as error:
                raise self.get_invalid_login_error() from error
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data
