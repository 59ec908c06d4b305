"""The design system's shared pieces as tags (picnic/static/picnic/design.css):

- `{% status_badge status %}`: an icon and the word, in its family's colour: done (green),
  failed (red), in flight (amber), neutral end (grey). Colour is never the only signal (WCAG
  1.4.1): the icon's shape and the word say it too. `main=True` marks the page's current
  status with `data-status` (the live pages and their tests read it); `label` replaces the
  word (end-user pages pass a translated one).
- `{{ status|status_family }}`: "done", "failed", "flight" or "neutral".
- `{% copyable value %}`: the value in <code> with a copy button (picnic/static/picnic/ui.js);
  `short=True` shows 0x1234…abcd, the full value on hover.
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

register = template.Library()

DONE = frozenset({"executed", "sent", "succeeded", "done", "active", "completed"})
# "unknown" is a DM whose outcome nobody knows: staff must act, so it reads as a failure.
FAILED = frozenset({"failed", "unknown", "error"})
# A refund or another token than asked: nothing lost but the fee, and not what was asked for.
NEUTRAL = frozenset(
    {"expired", "rejected", "cancelled", "revoked", "declined", "refunded", "partial"}
)

ICONS = {
    "done": '<path d="M3.5 8.5l3 3 6-7" fill="none" stroke="currentColor" stroke-width="2"/>',
    "failed": '<path d="M4 4l8 8M12 4l-8 8" fill="none" stroke="currentColor" stroke-width="2"/>',
    "flight": '<circle cx="8" cy="8" r="6" fill="none" stroke="currentColor" stroke-width="1.6"/>'
    '<path d="M8 4.5V8l2.5 1.5" fill="none" stroke="currentColor" stroke-width="1.6"/>',
    "neutral": '<path d="M4 8h8" fill="none" stroke="currentColor" stroke-width="2"/>',
}


@register.filter
def status_family(status) -> str:
    value = str(status or "")
    if value in DONE:
        return "done"
    if value in FAILED:
        return "failed"
    if value in NEUTRAL:
        return "neutral"
    return "flight"


def badge_html(status, label=None, main: bool = False, outcome=None) -> str:
    """`outcome` (actions: completed, refunded…) colours it when it says more than the status:
    an executed swap the bridge refunded is not a success."""
    family = status_family(outcome or status)
    icon = mark_safe(f'<svg viewBox="0 0 16 16" aria-hidden="true">{ICONS[family]}</svg>')
    word = label if label is not None else str(status).replace("_", " ")
    if label is None and outcome and status_family(outcome) != status_family(status):
        word = f"{word} · {outcome}"
    if main:
        return format_html(
            '<strong class="badge badge-{}" data-status="{}">{}{}</strong>',
            family,
            status,
            icon,
            word,
        )
    return format_html('<span class="badge badge-{}">{}{}</span>', family, icon, word)


@register.simple_tag
def status_badge(status, label=None, main: bool = False, outcome=None) -> str:
    return badge_html(status, label=label, main=main, outcome=outcome)


@register.simple_tag
def copyable(value, short: bool = False, label: str = "copy") -> str:
    if value in (None, ""):
        return "—"
    text = str(value)
    shown = f"{text[:6]}…{text[-4:]}" if short and len(text) > 14 else text
    return format_html(
        '<code title="{}">{}</code><button type="button" class="copy" data-copy="{}" '
        'aria-label="{} {}">{}</button>',
        text,
        shown,
        text,
        label,
        text,
        label,
    )
