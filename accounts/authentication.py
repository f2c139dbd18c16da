"""``Authorization: Token <key>`` for the API, with a lifetime and revocation."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts import selectors, services
from accounts.models import ApiToken


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token header checked against ``ApiToken`` (``selectors.api_token_problem``); 401 why not."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        token = ApiToken.objects.select_related("user").filter(key_digest=selectors.key_digest(key)).first()
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        problem = selectors.api_token_problem(token=token, now=timezone.now())
        if problem:
            if not token.user.is_active:
                services.api_tokens_revoke(user=token.user)
            raise AuthenticationFailed(problem)
        return token.user, token
