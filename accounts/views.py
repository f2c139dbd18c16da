"""The login page, and the page where a new account sets its password."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import reverse_lazy

from accounts.errors import LoginThrottled
from accounts.forms import LockoutAuthenticationForm
from accounts.throttles import LoginRateThrottle, throttle_wait


class LoginView(auth_views.LoginView):
    """Django's login view with the lockout and rate limit: 429 with ``Retry-After`` when refused."""

    form_class = LockoutAuthenticationForm

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        wait = throttle_wait(LoginRateThrottle(), request)
        if wait:
            # Unbound: a bound form would check the password when the template asks for its errors.
            context = self.get_context_data(form=self.form_class(request), throttled=LoginThrottled(wait))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: LockoutAuthenticationForm) -> HttpResponse:  # type: ignore[override]
        response = super().form_invalid(form)
        if form.locked_out is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.locked_out.retry_after)
        return response


class PasswordSetView(auth_views.PasswordResetConfirmView):
    """Django's password-reset confirmation, for a new account's one-time link (``password_set_path``)."""

    template_name = "registration/password_set.html"
    success_url = reverse_lazy("password_set_done")


class PasswordSetDoneView(auth_views.PasswordResetCompleteView):
    template_name = "registration/password_set_done.html"
