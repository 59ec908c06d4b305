"""An end user's remembered preferences (actions.models.Preferences)."""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_in

from actions.models import Preferences
from core.timezones import USER_ZONE_SESSION_KEY, zone_named


def preferences_set_time_zone(*, user, name: str) -> str | None:
    """Store the IANA zone `name` for `user`; None (nothing stored) for an unknown one."""
    if zone_named(name) is None:
        return None
    Preferences.objects.update_or_create(user=user, defaults={"time_zone": name})
    return name


def preferences_time_zone(*, user) -> str:
    return Preferences.objects.filter(user=user).values_list("time_zone", flat=True).first() or ""


def _remember_time_zone(sender, request, user, **kwargs) -> None:
    """On login: the zone stored with the user into their session (core.timezones)."""
    zone = preferences_time_zone(user=user)
    if zone and request is not None:
        request.session[USER_ZONE_SESSION_KEY] = zone


def connect_login_receiver() -> None:
    user_logged_in.connect(_remember_time_zone, dispatch_uid="actions-time-zone")
