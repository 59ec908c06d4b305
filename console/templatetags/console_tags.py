"""Small display helpers for the console: ages, shortened ids, the 24 h chart."""

from __future__ import annotations

import html
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from core.templatetags.chains import chain, explorer_url
from core.templatetags.picnic_ui import badge_html, status_family

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


@register.filter(expects_localtime=True)
def stamp(value: datetime) -> str:
    """`value|date:'Y-m-d H:i:s T'` by strftime: the same text, a tenth of the date filter's
    cost (two a row on a list of a hundred)."""
    return value.strftime("%Y-%m-%d %H:%M:%S %Z")


@register.filter
def short_id(value) -> str:
    """The id in monospace, its first 8 characters shown, all of it on hover and copy."""
    text = str(value)
    shown = text if len(text) <= 12 else f"{text[:8]}…"
    return format_html('<code class="id" title="{}">{}</code>', text, shown)


def _e(value) -> str:
    """`{{ value }}`'s escaping: safe text as it is, anything else escaped. Django's own
    `conditional_escape`, minus its wrapping: it calls the same `html.escape`, but through
    `keep_lazy` and with a `SafeString` made for each result, which for the 25 values of 100
    rows was a measurable part of the row's time; the row is marked safe once, whole. The
    row test compares this markup with the template's, hostile text included."""
    return value.__html__() if hasattr(value, "__html__") else html.escape(str(value))


@register.simple_tag(takes_context=True)
def console_row(context, row) -> str:
    """One row of a console list (`console/_rows.html`): the markup a template drew, built in
    one pass. A hundred rows of about 25 template nodes each were most of the home's time."""
    key, kind, rid = _e(row.key), _e(row.kind), _e(row.id)
    family = status_family(row.outcome or row.status)
    select = ""
    if context.get("selectable"):
        checked = " checked" if row.key in (context.get("checked") or ()) else ""
        select = (
            f'<td><input type="checkbox" name="key" value="{key}" '
            f'aria-label="select {kind} {rid}"{checked}></td>'
        )
    on_chain = f' <small class="muted">on {chain(row.chain_id)}</small>' if row.chain_id else ""
    links = f'<a href="{_e(row.timeline_url)}">timeline</a> · ' if row.timeline_url else ""
    links += f'<a href="{_e(row.admin_url)}">admin</a>'
    if row.tx_hash and (tx_url := explorer_url(row.chain_id, "tx", row.tx_hash)):
        links += (
            f' · <a class="explorer" href="{_e(tx_url)}" rel="noopener noreferrer" '
            f'title="{_e(row.tx_hash)} on the explorer">tx</a>'
        )
    since, created = timezone.localtime(row.since), timezone.localtime(row.created_at)
    now = context.get("now")
    return mark_safe(  # noqa: S308 - every value above is escaped or built safe
        f'<tr data-key="{key}" class="status-{_e(row.status)} family-{_e(family)}">\n'
        f"      {select}\n"
        f"      <td>{kind}{on_chain}</td>\n"
        f'      <td class="nowrap">{short_id(row.id)}<button type="button" class="copy" '
        f'data-copy="{rid}" aria-label="copy {kind} id {rid}">copy</button></td>\n'
        f'      <td class="nowrap">{badge_html(row.status, outcome=row.outcome)}</td>\n'
        f"      <td>{_e(row.why)}</td>\n"
        f'      <td class="nowrap age" title="last change {_e(stamp(since))}, created '
        f'{_e(stamp(created))}">{_e(age(row.since, now))}</td>\n'
        f"      <td>{_e(row.owner)}</td>\n"
        f'      <td class="error">{_e(row.error)}</td>\n'
        f'      <td class="nowrap">{links}</td>\n'
        "    </tr>"
    )


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
        title = escape(f"{local:%H}:00 {local:%Z} — {total} transitions, {failed} to a failure")
        w = width - BAR_GAP
        # Numbers and an escaped title: joined as text, not by format_html per bar (120 a page).
        bars.append(
            f'<g><title>{title}</title><rect class="bar" x="{x:.1f}" y="{CHART_H - h:.1f}" '
            f'width="{w:.1f}" height="{h:.1f}"/><rect class="bar-failed" x="{x:.1f}" '
            f'y="{CHART_H - hf:.1f}" width="{w:.1f}" height="{hf:.1f}"/></g>'
        )
    body = mark_safe("".join(bars))  # noqa: S308 - numbers and escaped titles only
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
