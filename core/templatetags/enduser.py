"""Filters for end-user pages (core/l10n.py): amounts, money, dates in the page's language."""

from __future__ import annotations

from django import template

from core import l10n

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
def relative(value) -> str:
    return l10n.format_relative(value)


@register.filter
def duration(seconds) -> str:
    """Seconds as a length of time: "3 minutes", "3 minutos"."""
    return l10n.format_duration(int(seconds or 0))
