"""An end user's remembered preferences (actions.accounts.models.Preferences)."""

from __future__ import annotations

from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.utils import timezone, translation

from actions.accounts.models import Preferences
from core.timezones import USER_ZONE_SESSION_KEY, zone_named


def preferences_set_time_zone(*, user, name: str) -> str | None:
    """Store the IANA zone `name` for `user`; None (nothing stored) for an unknown one."""
    if zone_named(name) is None:
        return None
    Preferences.objects.update_or_create(user=user, defaults={"time_zone": name})
    return name


def preferences_time_zone(*, user) -> str:
    return Preferences.objects.filter(user=user).values_list("time_zone", flat=True).first() or ""


def preferences_set_language(*, user, language: str) -> str | None:
    """Remember the language `user`'s pages are shown in (what their e-mails are written in);
    None (nothing stored) for one the site does not offer. Writes only when it changed."""
    code = (language or "").lower()
    if code not in dict(settings.LANGUAGES):
        return None
    if not Preferences.objects.filter(user=user, language=code).exists():
        Preferences.objects.update_or_create(user=user, defaults={"language": code})
    return code


@contextmanager
def in_users_words(user):
    """Translations and times in `user`'s own language and time zone, for what reaches them
    away from a page (e-mail); the site's defaults for what they never told us."""
    stored = Preferences.objects.filter(user=user).values("language", "time_zone").first() or {}
    language = stored.get("language") or settings.LANGUAGE_CODE
    zone = zone_named(stored.get("time_zone")) or zone_named(settings.TIME_ZONE)
    with translation.override(language), timezone.override(zone):
        yield


@contextmanager
def in_users_zone(user):
    """Times in `user`'s own time zone (the site's if they never told us), in the page's
    language: for a page seen before the session knows them (the recovery page)."""
    stored = preferences_time_zone(user=user)
    with timezone.override(zone_named(stored) or zone_named(settings.TIME_ZONE)):
        yield


def _remember_time_zone(sender, request, user, **kwargs) -> None:
    """On login: the zone stored with the user into their session (core.timezones), and the
    language they signed in with stored with the user."""
    zone = preferences_time_zone(user=user)
    if zone and request is not None:
        request.session[USER_ZONE_SESSION_KEY] = zone
    # LocaleMiddleware's pick for the sign-in page (absent on a request made up in code).
    language = getattr(request, "LANGUAGE_CODE", None)
    if language:
        preferences_set_language(user=user, language=language)


def connect_login_receiver() -> None:
    user_logged_in.connect(_remember_time_zone, dispatch_uid="actions-time-zone")
