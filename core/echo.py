"""What an error message may say about a rejected value: a short, escaped prefix, never the
value itself (a 100 KB value must not come back in the error, the log line or the page)."""

from __future__ import annotations

# Enough to recognise what was sent, too little to reflect anything.
PREFIX_CHARS = 32


def prefix(value: object, limit: int = PREFIX_CHARS) -> str:
    """`value` as a quoted, escaped (repr) prefix of at most `limit` characters, `…` when cut."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + "…"
