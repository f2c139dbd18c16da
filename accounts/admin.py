"""API tokens and failed logins (deleting revokes or unlocks); deactivating a user revokes its tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from accounts import selectors, services
from accounts.models import ApiToken, LoginFailure

User = get_user_model()


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


# Django's own user admin (registered by now), with deactivation revoking API tokens.
admin.site.unregister(User)


@admin.register(User)
class AccountUserAdmin(UserAdmin):
    actions = ["deactivate_users"]

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm, change: bool) -> None:
        # Counted before the save: the database deletes them as is_active goes false.
        revoked = ApiToken.objects.filter(user=obj).count() if obj.pk and not obj.is_active else 0
        super().save_model(request, obj, form, change)
        if not obj.is_active:
            services.api_tokens_revoke(user=obj)  # where the database has no trigger doing it
            if revoked:
                self.message_user(request, f"Deactivated {obj}: {revoked} API token(s) revoked.")

    @admin.action(description="Deactivate the selected users and revoke their API tokens")
    def deactivate_users(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        names, revoked = [], 0
        for user in queryset:
            if user.pk == getattr(request.user, "pk", None):
                self.message_user(request, "You cannot deactivate your own account.", messages.ERROR)
                continue
            revoked += services.user_deactivate(user=user)
            names.append(str(user))
        if names:
            self.message_user(request, f"Deactivated {', '.join(names)}: {revoked} API token(s) revoked.")
