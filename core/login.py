"""Password guessing is limited: LOGIN_MAX_FAILURES wrong passwords for one username from one
client address lock that pair out for LOGIN_LOCKOUT_SECONDS (counted from the first failure),
even for the right password. A successful login clears the count.

The count lives in the default cache (core/throttle.py): per process with the embedded locmem
cache, shared by every web process with CACHE_URL=redis://… (production; `make prod` refuses
to start without it).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.utils.translation import gettext_lazy as _

from core import throttle

THROTTLE = "login-failures"


def _subject(request, username: str) -> str:
    address = getattr(request, "META", {}).get("REMOTE_ADDR", "") if request else ""
    return f"{username.strip().casefold()}\0{address}"


def locked_out(request, username: str | None) -> bool:
    if not username:
        return False
    return throttle.count(THROTTLE, _subject(request, username)) >= settings.LOGIN_MAX_FAILURES


def record_failure(request, username: str) -> None:
    throttle.hit(
        THROTTLE, _subject(request, username), window_seconds=settings.LOGIN_LOCKOUT_SECONDS
    )


def clear_failures(request, username: str) -> None:
    throttle.clear(THROTTLE, _subject(request, username))


class ThrottledModelBackend(ModelBackend):
    """Every authenticate(username, password) goes through the limiter, whichever form asked."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(self._username_field())
        if username is None or password is None:
            return None
        if locked_out(request, username):
            # Stops the backend chain: even the right password is refused while locked out.
            raise PermissionDenied("too many failed logins")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            record_failure(request, username)
        else:
            clear_failures(request, username)
        return user

    @staticmethod
    def _username_field() -> str:
        return get_user_model().USERNAME_FIELD


LOCKED_OUT_MESSAGE = _(
    "Too many failed sign-ins for this username from your address. "
    "Try again in %(minutes)d minutes."
)


class _ThrottleMessageMixin:
    """Says why a locked-out login is refused, instead of "wrong password"."""

    def clean(self):
        username = self.cleaned_data.get("username")
        if locked_out(self.request, username):
            minutes = max(1, round(settings.LOGIN_LOCKOUT_SECONDS / 60))
            raise ValidationError(
                LOCKED_OUT_MESSAGE, code="too_many_attempts", params={"minutes": minutes}
            )
        return super().clean()


class ThrottledAuthenticationForm(_ThrottleMessageMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_ThrottleMessageMixin, AdminAuthenticationForm):
    pass


class ThrottledLoginView(LoginView):
    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        for error in form.errors.as_data().get(NON_FIELD_ERRORS, []):
            if error.code == "too_many_attempts":
                locked_out = error.message % error.params
                context = self.get_context_data(form=form, locked_out=locked_out)
                return self.render_to_response(context, status=429)
        return super().form_invalid(form)
