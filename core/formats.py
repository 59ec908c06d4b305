"""How every API of ours writes values that have more than one spelling."""

from __future__ import annotations

from datetime import datetime


def rfc3339(value: datetime | None) -> str | None:
    """A datetime as RFC 3339 with `Z` for UTC (`2026-12-02T10:00:00Z`); None stays None."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")
