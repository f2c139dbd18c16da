"""``POST /api/token/``: username and password in, ``{"token": "<key>"}`` out."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import services
from accounts.errors import InvalidCredentials, LoginLockedOut
from accounts.throttles import LoginRateThrottle, client_address


class TokenCreateInput(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(trim_whitespace=False, style={"input_type": "password"})


class TokenCreateOutput(serializers.Serializer):
    token = serializers.CharField(help_text="Send as 'Authorization: Token <token>'; shown once.")


class ApiTokenCreateApi(APIView):
    """A new token for a script, valid BIASLAB_API_TOKEN_HOURS, revoked by a password change."""

    # The credentials are in the body: a stale token in the header must not turn this into a 401.
    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = (LoginRateThrottle,)

    def post(self, request: Request) -> Response:
        data = TokenCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            user = services.credentials_check(
                request=request,
                username=data.validated_data["username"],
                password=data.validated_data["password"],
                address=client_address(request),
            )
        except LoginLockedOut as locked:
            raise Throttled(wait=locked.retry_after, detail=str(locked)) from locked
        except InvalidCredentials as error:
            raise ValidationError({"non_field_errors": [str(error)]}, code="authorization") from error
        return Response(TokenCreateOutput({"token": services.api_token_create(user=user)}).data)
