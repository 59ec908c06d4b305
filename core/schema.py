"""Schema fragments every contract shares, and the checks every input gets before its schema.

Patterns are published to MCP clients (ECMA-262) and checked here by jsonschema (Python's `re`,
with `re.search`). The two disagree on `$`: Python's matches before a final "\\n", so
`^[0-9]{1,19}$` accepts "4244\\n". `END` is an end anchor both read the same way: a negative
lookahead for any character at all, i.e. the true end of the string (`\\Z` is not ECMA-262).
Patterns use ASCII classes (`[0-9]`, never `\\d`: Python's `\\d` matches "١" and "１").

NUL (PostgreSQL text refuses it), lone surrogates (not encodable as UTF-8) and numbers that
are not finite (JSON `1e400` parses to inf) cannot be written as a schema keyword MCP clients
understand, so `input_problems` rejects them in any string, key or number of any input, before
the schema runs (`core.api.schema_errors`).

`format: date-time` is checked by `FORMATS` with `parse_date_time`, stricter than jsonschema's
own (which let "2027-02-30" reach the service and raise there): a real calendar day, hours
00-23, no leap second (a datetime cannot hold one) and an offset no wider than ±14:00.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from jsonschema import FormatChecker

END = r"(?![\s\S])"  # the end of the string, in Python's re and in ECMA-262 alike

# Digits only, a decimal point only between digits: "1_000", "+1", " 7 ", "１０", "1e3" refused.
# 78 digits hold any uint256; the services check the exact range after scaling by decimals.
AMOUNT_PATTERN = rf"^[0-9]{{1,78}}(\.[0-9]{{1,78}})?{END}"
AMOUNT = {
    "type": "string",
    "pattern": AMOUNT_PATTERN,
    "maxLength": 157,
    "description": "a positive decimal string of ASCII digits, e.g. 12.5",
}


def fullmatch_pattern(body: str) -> str:
    """`^body` anchored at the true end of the string (see END)."""
    return f"^(?:{body}){END}"


_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def _text_problem(value: str) -> str | None:
    match = _UNSAFE.search(value)
    if match is None:
        return None
    if match.group() == "\x00":
        return "must not contain NUL characters (U+0000)"
    return "must not contain lone surrogates (U+D800 to U+DFFF): send valid Unicode text"


def input_problems(data: Any, *, root: str) -> dict[str, list[str]]:
    """Messages keyed by field (dotted path, or `root`) for every string or key holding NUL or a
    lone surrogate and every number that is not finite, however deeply nested."""
    problems: dict[str, list[str]] = {}
    stack: list[tuple[Any, list[str]]] = [(data, [])]  # iterative: nesting cannot exhaust it
    while stack:
        value, path = stack.pop()
        field = ".".join(path) or root
        if isinstance(value, str):
            if problem := _text_problem(value):
                problems.setdefault(field, []).append(problem)
        elif isinstance(value, float) and not math.isfinite(value):
            problems.setdefault(field, []).append("must be a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (problem := _text_problem(key)):
                    problems.setdefault(field, []).append(f"a key {problem}")
                else:
                    stack.append((item, [*path, str(key)]))
        elif isinstance(value, list):
            stack.extend((item, [*path, str(i)]) for i, item in enumerate(value))
    return dict(sorted(problems.items()))


# --- date-times ------------------------------------------------------------------------------

# RFC 3339's `date-time` (section 5.6) with two narrowings: seconds stop at 59 (Python's
# datetime, hence every service, cannot hold a leap second) and the offset stays within the
# ones in use, -12:00 to +14:00 (`+23:59` is grammatical but no clock shows it: a typo).
# The grammar alone lets 30 February through: `parse_date_time` checks the calendar.
DATE_TIME_PATTERN = (
    r"^(?<year>[0-9]{4})-(?<month>0[1-9]|1[0-2])-(?<day>0[1-9]|[12][0-9]|3[01])"
    r"[Tt](?<hour>[01][0-9]|2[0-3]):(?<minute>[0-5][0-9]):(?<second>[0-5][0-9])"
    r"(?:\.(?<fraction>[0-9]{1,9}))?"
    r"(?<offset>[Zz]|[+-](?:0[0-9]|1[0-3]):[0-5][0-9]|[+-]14:00)" + END
)
_DATE_TIME = re.compile(DATE_TIME_PATTERN.replace("(?<", "(?P<"))
# ECMA-262 spells named groups `(?<name>`, Python `(?P<name>`: published without names.
_PUBLISHED_PATTERN = re.sub(r"\(\?<[a-z]+>", "(", DATE_TIME_PATTERN)
DATE_TIME_DESCRIPTION = "an RFC 3339 date-time with a time zone, like 2027-03-31T00:00:00Z"


def parse_date_time(value: str) -> datetime | None:
    """`value` as an aware datetime when it is a strict RFC 3339 date-time (see
    DATE_TIME_PATTERN) naming a day that exists, else None; never raises."""
    match = _DATE_TIME.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    parts = match.groupdict()
    offset = timedelta(0)
    if parts["offset"] not in ("Z", "z"):
        hours, minutes = parts["offset"][1:].split(":")
        offset = timedelta(hours=int(hours), minutes=int(minutes))
        offset = -offset if parts["offset"][0] == "-" else offset
    try:
        parsed = datetime(
            int(parts["year"]),
            int(parts["month"]),
            int(parts["day"]),
            int(parts["hour"]),
            int(parts["minute"]),
            int(parts["second"]),
            int((parts["fraction"] or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
        # The instant must exist in UTC too: 9999-12-31T23:00:00-14:00 does not, and storing
        # or converting it would raise.
        parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # 30 February, 31 April, year 0000; out of range
        return None
    return parsed


def date_time(description: str = DATE_TIME_DESCRIPTION) -> dict[str, Any]:
    """An input date-time field: the grammar as a pattern (for clients that skip formats) and
    `format: date-time`, which `FORMATS` checks strictly here."""
    return {
        "type": "string",
        "format": "date-time",
        "pattern": _PUBLISHED_PATTERN,
        "maxLength": 64,
        "description": description,
    }


FORMATS = FormatChecker()


@FORMATS.checks("date-time")
def _strict_date_time(value: object) -> bool:
    # Only strings have a format (JSON Schema): other types are the `type` keyword's to refuse.
    return not isinstance(value, str) or parse_date_time(value) is not None
