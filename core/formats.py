"""How every API of ours writes values that have more than one spelling."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal


def rfc3339(value: datetime | None) -> str | None:
    """A datetime as RFC 3339 with `Z` for UTC (`2026-12-02T10:00:00Z`); None stays None."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def decimal_string(units: int, decimals: int) -> str:
    """Token units as a plain decimal, no exponent and no trailing zeros: 1500000, 6 -> "1.5"."""
    value = Decimal(units).scaleb(-decimals)
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
