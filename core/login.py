"""Password guessing is limited by three counts of wrong passwords, each over
LOGIN_LOCKOUT_SECONDS (counted from the first failure); past any of them even the right
password is refused:

- LOGIN_MAX_FAILURES for one username from one client address (a successful login clears it);
- LOGIN_MAX_FAILURES_PER_ADDRESS from one address, whatever the usernames (spraying);
- LOGIN_MAX_FAILURES_PER_ACCOUNT for one username from all addresses together: generous, so
  that locking a victim out takes many addresses, and a browser that signed in to the account
  before (a signed device cookie) is neither counted nor held by it.

The address is the client's as core/proxy.py resolved it: a forged X-Forwarded-For changes
nothing. The counts live in the default cache (core/throttle.py): per process with the
embedded locmem cache, shared by every web process with CACHE_URL=redis://… (production;
`make prod` refuses to start without it).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core import signing
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.utils.translation import gettext_lazy as _

from core import throttle

THROTTLE = "login-failures"
ADDRESS_THROTTLE = "login-failures-address"
ACCOUNT_THROTTLE = "login-failures-account"
DEVICE_COOKIE = "picnic_login_device"
DEVICE_COOKIE_SALT = "core.login.device"
DEVICE_COOKIE_MAX_AGE = 180 * 24 * 3600
# A browser remembers this many accounts it signed in to (a shared family computer).
DEVICE_ACCOUNTS = 5


def _username(username: str) -> str:
    return username.strip().casefold()


def _address(request) -> str:
    return getattr(request, "META", {}).get("REMOTE_ADDR", "") if request else ""


def _subject(request, username: str) -> str:
    return f"{_username(username)}\0{_address(request)}"


def device_accounts(request) -> list[str]:
    """The usernames this browser signed in to (its signed device cookie), else []."""
    value = getattr(request, "COOKIES", {}).get(DEVICE_COOKIE) if request else None
    if not value:
        return []
    try:
        accounts = signing.loads(value, salt=DEVICE_COOKIE_SALT, max_age=DEVICE_COOKIE_MAX_AGE)
    except signing.BadSignature:  # forged, altered or expired: an unknown device
        return []
    return [a for a in accounts if isinstance(a, str)] if isinstance(accounts, list) else []


def known_device(request, username: str) -> bool:
    return _username(username) in device_accounts(request)


def remember_device(request, response, username: str) -> None:
    """After a successful sign-in: this browser is a known device of `username`."""
    accounts = [_username(username)]
    accounts += [a for a in device_accounts(request) if a != accounts[0]]
    response.set_cookie(
        DEVICE_COOKIE,
        signing.dumps(accounts[:DEVICE_ACCOUNTS], salt=DEVICE_COOKIE_SALT),
        max_age=DEVICE_COOKIE_MAX_AGE,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )


def locked_out(request, username: str | None) -> bool:
    if not username:
        return False
    if throttle.count(THROTTLE, _subject(request, username)) >= settings.LOGIN_MAX_FAILURES:
        return True
    address_failures = throttle.count(ADDRESS_THROTTLE, _address(request))
    if address_failures >= settings.LOGIN_MAX_FAILURES_PER_ADDRESS:
        return True
    if known_device(request, username):
        return False
    account_failures = throttle.count(ACCOUNT_THROTTLE, _username(username))
    return account_failures >= settings.LOGIN_MAX_FAILURES_PER_ACCOUNT


def record_failure(request, username: str) -> None:
    window = settings.LOGIN_LOCKOUT_SECONDS
    throttle.hit(THROTTLE, _subject(request, username), window_seconds=window)
    throttle.hit(ADDRESS_THROTTLE, _address(request), window_seconds=window)
    if not known_device(request, username):
        throttle.hit(ACCOUNT_THROTTLE, _username(username), window_seconds=window)


def clear_failures(request, username: str) -> None:
    # Only the username-and-address count: the others would let whoever knows one password
    # reset the count of an address or of an account under attack.
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


# One message for the three limits (translated in locale/): which one was hit is not said.
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

    def form_valid(self, form):
        response = super().form_valid(form)
        remember_device(self.request, response, form.get_user().get_username())
        return response

    def form_invalid(self, form):
        for error in form.errors.as_data().get(NON_FIELD_ERRORS, []):
            if error.code == "too_many_attempts":
                locked_out = error.message % error.params
                context = self.get_context_data(form=form, locked_out=locked_out)
                return self.render_to_response(context, status=429)
        return super().form_invalid(form)
