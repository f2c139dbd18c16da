"""Admins see who holds API tokens and who is locked out; deleting a row revokes or unlocks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from accounts import selectors
from accounts.models import ApiToken, LoginFailure


class _ReadOnly(admin.ModelAdmin):
    """Rows are written by the services only; an admin may look and delete."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(_ReadOnly):
    list_display = ("user", "created_at", "expires_at")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    exclude = ("key_digest", "password_fingerprint")

    @admin.display(description="expires")
    def expires_at(self, token: ApiToken) -> datetime:
        return token.created_at + selectors.token_lifetime()


@admin.register(LoginFailure)
class LoginFailureAdmin(_ReadOnly):
    list_display = ("username", "address", "created_at")
    search_fields = ("username", "address")
    list_filter = ("created_at",)
