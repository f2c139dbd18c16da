"""The login page."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpResponse

from accounts.forms import LockoutAuthenticationForm


class LoginView(auth_views.LoginView):
    """Django's login view with the lockout: a locked-out attempt answers 429 with
    ``Retry-After`` and the page says how long to wait."""

    form_class = LockoutAuthenticationForm

    def form_invalid(self, form: LockoutAuthenticationForm) -> HttpResponse:  # type: ignore[override]
        response = super().form_invalid(form)
        if form.locked_out is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.locked_out.retry_after)
        return response
