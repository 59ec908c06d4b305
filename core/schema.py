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
"""

from __future__ import annotations

import math
import re
from typing import Any

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
