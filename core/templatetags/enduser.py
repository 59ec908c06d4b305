"""Filters for end-user pages (core/l10n.py): amounts, money, dates in the page's language."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from core import l10n
from core.templatetags.picnic_dates import utc_iso

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
    return l10n.format_datetime(value)


@register.filter
def local_time(value) -> str:
    """<time> around local_datetime (UTC, to the second): picnic/local_time.js rewrites it in
    the browser's own time zone and language; without JavaScript the UTC text stays right."""
    if value is None:
        return ""
    return format_html(
        '<time datetime="{}" data-local>{}</time>', utc_iso(value), l10n.format_datetime(value)
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
