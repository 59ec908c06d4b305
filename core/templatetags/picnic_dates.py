"""Dates kept as ISO strings in JSON (e.g. an operation's review request), as datetimes the
`date` filter writes in the staff member's time zone, without the microseconds."""

from __future__ import annotations

from django import template
from django.utils.dateparse import parse_datetime

register = template.Library()


@register.filter
def as_datetime(value):
    """An ISO 8601 string as a datetime; anything else unchanged."""
    if isinstance(value, str):
        try:
            return parse_datetime(value) or value
        except ValueError:
            return value
    return value
