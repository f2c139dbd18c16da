from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts: API tokens and login protection"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts import checks  # noqa: F401  (registers the deploy checks)
