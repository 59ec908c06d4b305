"""Staff pages in the staff member's own time zone.

The zone is a cookie set from the admin's "time zone" page (no JavaScript, no profile table):
it belongs to the browser, the way the staff member's clock does, and survives logging out.
It applies to the admin and the staff pages only: API answers and the signing page stay UTC.
"""

from __future__ import annotations

import zoneinfo
from functools import cache

from django.conf import settings
from django.utils import timezone

COOKIE = "picnic_timezone"
COOKIE_MAX_AGE = 365 * 24 * 3600
STAFF_PATHS = ("/admin/", "/staff/")


@cache
def zone_names() -> list[str]:
    return sorted(zoneinfo.available_timezones())


def zone_named(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The zone of an IANA name, or None for a missing or unknown one (a stale cookie)."""
    if not name or name not in set(zone_names()):
        return None
    return zoneinfo.ZoneInfo(name)


class StaffTimezoneMiddleware:
    """Activates the zone of the `picnic_timezone` cookie on staff pages; the rest (and staff
    without the cookie) see settings.TIME_ZONE."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = None
        if request.path.startswith(STAFF_PATHS):
            zone = zone_named(request.COOKIES.get(COOKIE))
        if zone is None:
            timezone.deactivate()
            return self.get_response(request)
        timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def set_zone_cookie(response, name: str) -> None:
    response.set_cookie(
        COOKIE,
        name,
        max_age=COOKIE_MAX_AGE,
        samesite="Lax",
        httponly=True,
        secure=settings.SESSION_COOKIE_SECURE,
    )
