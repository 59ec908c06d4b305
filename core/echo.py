"""What an error message may say about a rejected value: a short, escaped prefix, never the
value itself (a 100 KB value must not come back in the error, the log line or the page)."""

from __future__ import annotations

# Enough to recognise what was sent, too little to reflect anything.
PREFIX_CHARS = 32


def prefix(value: object, limit: int = PREFIX_CHARS) -> str:
    """`value` as its escaped repr (a string quoted) of at most `limit` characters of the value,
    `…` when cut: `'abc'`, `0`, `['a', …`."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


# An id or name this long is shown as sent: a UUID (36), a tool name, an action URI.
NAMED_CHARS = 80


def named(value: object, limit: int = NAMED_CHARS) -> str:
    """What a "not found" message names: `value` as sent when it is a short printable string
    (the seeds' texts, "Action not found: abc"), else its `prefix`."""
    if isinstance(value, str) and len(value) <= limit and value.isprintable():
        return value
    return prefix(value)
