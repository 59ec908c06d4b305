"""Filters for end-user pages (core/l10n.py): amounts, money, dates in the page's language."""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.html import format_html

from core import l10n
from core.templatetags.picnic_dates import utc_iso
from core.user_agents import device_description

register = template.Library()


@register.filter
def amount(value) -> str:
    return l10n.format_amount(value)


@register.filter
def money(value, currency: str) -> str:
    return l10n.format_money(value, currency)


@register.filter
def percent(value) -> str:
    return l10n.format_percent(value)


@register.filter
def local_datetime(value) -> str:
    """The plain text of local_time ("6 de dez. de 2026 09:32 BRT"), for an attribute."""
    return l10n.format_datetime(value)


@register.filter
def local_time(value) -> str:
    """A time as every end-user page writes it: the user's zone, to the minute, with the zone's
    short name (l10n.format_datetime); its IANA name only on hover, the UTC value in
    `datetime`. picnic/local_time.js rewrites it when the browser's zone is not the page's."""
    if value is None:
        return ""
    return format_html(
        '<time datetime="{}" data-local title="{}">{}</time>',
        utc_iso(value),
        timezone.get_current_timezone_name(),
        l10n.format_datetime(value),
    )


@register.filter
def iso(value) -> str:
    """RFC 3339 in UTC to the second, for a <time datetime> (never the microseconds)."""
    return utc_iso(value) if value is not None else ""


@register.filter
def relative(value) -> str:
    return l10n.format_relative(value)


@register.filter
def duration(seconds) -> str:
    """Seconds as a length of time: "3 minutes", "3 minutos"."""
    return l10n.format_duration(int(seconds or 0))


@register.filter
def device(user_agent) -> str:
    """A recorded User-Agent as people name the device: "Chrome on macOS"."""
    return device_description(user_agent or "")
