"""Small display helpers for the console: ages, shortened ids, the 24 h chart."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join

register = template.Library()


@register.filter
def age(since: datetime, now: datetime) -> str:
    """ "3 d 4 h", "2 h 5 min", "7 min", "40 s"."""
    seconds = int((now - since).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if days:
        return f"{days} d {hours % 24} h"
    if hours:
        return f"{hours} h {minutes % 60} min"
    return f"{minutes} min"


@register.filter
def short_id(value) -> str:
    """The id in monospace, its first 8 characters shown, all of it on hover and copy."""
    text = str(value)
    shown = text if len(text) <= 12 else f"{text[:8]}…"
    return format_html('<code class="id" title="{}">{}</code>', text, shown)


CHART_W, CHART_H, BAR_GAP = 240, 48, 1


@register.simple_tag
def hours_chart(hours: list[tuple[datetime, int, int]], label: str) -> str:
    """Transitions per hour over the last 24 h as an inline SVG (no script, no CDN):
    each bar's height is the hour's transitions, its red part those to a failure status."""
    peak = max((total for _, total, _ in hours), default=0) or 1
    width = CHART_W / max(len(hours), 1)
    bars = []
    for i, (hour, total, failed) in enumerate(hours):
        x = i * width
        h = CHART_H * total / peak
        hf = CHART_H * failed / peak
        local = timezone.localtime(hour)  # the staff member's zone (core.timezones)
        title = f"{local:%H}:00 {local:%Z} — {total} transitions, {failed} to a failure"
        numbers = (x, CHART_H - h, width - BAR_GAP, h, x, CHART_H - hf, width - BAR_GAP, hf)
        bars.append((title, *(f"{n:.1f}" for n in numbers)))
    body = format_html_join(
        "",
        '<g><title>{}</title><rect class="bar" x="{}" y="{}" width="{}" height="{}"/>'
        '<rect class="bar-failed" x="{}" y="{}" width="{}" height="{}"/></g>',
        bars,
    )
    start = timezone.localtime(hours[0][0]) if hours else None
    # The last bar is the hour in progress: its right edge is now, not the hour's end.
    end = timezone.localtime() if hours else None
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img" '
        'aria-label="{}">{}</svg><div class="chart-axis"><span>{}</span><span>{}</span></div>',
        CHART_W,
        CHART_H,
        CHART_W,
        CHART_H,
        label,
        body,
        f"{start:%H}:00 yesterday" if start else "",
        f"now ({end:%H:%M} {end:%Z})" if end else "",
    )
