"""Dates as people read them on staff pages: to the second, in the staff member's time zone
(core.timezones), with the exact value on hover; never a raw isoformat with microseconds.
Also dates kept as ISO strings in JSON (e.g. an operation's review request), as datetimes."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

register = template.Library()

SHOWN = "Y-m-d H:i:s T"  # the admin's DATETIME_FORMAT (core/locale_formats/en/formats.py)


@register.filter
def as_datetime(value):
    """An ISO 8601 string as a datetime; anything else unchanged."""
    if isinstance(value, str):
        try:
            return parse_datetime(value) or value
        except ValueError:
            return value
    return value


def utc_iso(value: datetime) -> str:
    """RFC 3339 in UTC to the second: what a <time datetime> carries (and end-user pages'
    script reads)."""
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@register.filter
def timestamp(value, empty: str = "—"):
    """A datetime (or an ISO string) as <time>: "2026-12-04 13:36:07 CET" in the active zone,
    the ISO value in that zone on hover, UTC in `datetime`; `empty` for None."""
    value = as_datetime(value)
    if not isinstance(value, datetime):
        return empty if value in (None, "") else value
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    local = timezone.localtime(value).replace(microsecond=0)
    return format_html(
        '<time datetime="{}" title="{} ({})">{}</time>',
        utc_iso(value),
        local.isoformat(),
        timezone.get_current_timezone_name(),
        date_format(local, SHOWN),
    )
