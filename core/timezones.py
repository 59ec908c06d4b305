"""Pages in the reader's own time zone.

Staff: the zone is a cookie set from the admin's "time zone" page (no JavaScript, no profile
table): it belongs to the browser, the way the staff member's clock does, and survives logging
out. It applies to the admin and the staff pages.
End users: the zone their browser reports (picnic/local_time.js), stored with the user
(actions.accounts.models.Preferences) and kept in the session under USER_ZONE_SESSION_KEY; it applies
to every other page. API answers stay UTC (RFC 3339).
"""

from __future__ import annotations

import zoneinfo
from functools import cache

from django.conf import settings
from django.utils import timezone

COOKIE = "picnic_timezone"
COOKIE_MAX_AGE = 365 * 24 * 3600
STAFF_PATHS = ("/admin/", "/staff/")
USER_ZONE_SESSION_KEY = "picnic_user_zone"
API_PATHS = ("/api/",)


@cache
def zone_names() -> list[str]:
    return sorted(zoneinfo.available_timezones())


def zone_named(name: str | None) -> zoneinfo.ZoneInfo | None:
    """The zone of an IANA name, or None for a missing or unknown one (a stale cookie)."""
    if not name or name not in set(zone_names()):
        return None
    return zoneinfo.ZoneInfo(name)


class StaffTimezoneMiddleware:
    """Activates the zone of the `picnic_timezone` cookie on staff pages, and the end user's
    stored zone (in their session) on the other pages but the API; the rest see
    settings.TIME_ZONE."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = None
        if request.path.startswith(STAFF_PATHS):
            zone = zone_named(request.COOKIES.get(COOKIE))
        elif not request.path.startswith(API_PATHS) and hasattr(request, "session"):
            zone = zone_named(request.session.get(USER_ZONE_SESSION_KEY))
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
