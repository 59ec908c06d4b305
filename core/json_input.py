"""One limit in front of every JSON body the project parses: the DRF parser (`JSONParser`, the
REST_FRAMEWORK default), the signing page's JSON endpoints (`json_body`), the history cursor.

A body is refused with a 400 in the API's one error body (code `parse_error`, or
`body_too_large`) when it is larger than DATA_UPLOAD_MAX_MEMORY_SIZE, is not UTF-8, or nests
deeper than MAX_DEPTH. The depth is counted by a linear scan BEFORE any JSON decoder sees the
body: py_ecc (a web3 dependency) raises the recursion limit to 100 000, so the C decoder
overflowed the C stack (a segfault of the web server) long before Python's guard tripped.
The refusal names the limit and never echoes the body.
"""

from __future__ import annotations

import io
import json
import re
from itertools import accumulate

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from rest_framework import exceptions, parsers

# No input of the three apps' contracts nor a WebAuthn credential comes near this (the deepest
# is 4: credential → response → transports → item).
MAX_DEPTH = 64
_DEFAULT_MAX_BYTES = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE default

# A string (escapes skipped; an unterminated one runs to the end, so the scan stays linear).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


class BodyRefused(exceptions.ParseError):
    """A 400 that core.api's handler writes as the one body (`errors` is `{}`). Not an
    ApiError: DRF imports this module while its views load, before core.api can be."""


def max_body_bytes() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or _DEFAULT_MAX_BYTES


def nesting_depth(raw: bytes) -> int:
    """The deepest bracket nesting outside strings, in C-level passes (no recursion)."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(max(accumulate(map(_STEP.__getitem__, brackets)), default=0), 0)


def too_large() -> BodyRefused:
    return BodyRefused(
        f"The request body is larger than the limit of {max_body_bytes()} bytes",
        code="body_too_large",
    )


def checked_text(raw: bytes) -> str:
    """The body as text, or BodyRefused: too large, not UTF-8, or nested too deep."""
    if len(raw) > max_body_bytes():
        raise too_large()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyRefused("JSON parse error: the body is not UTF-8 text") from None
    if nesting_depth(raw) > MAX_DEPTH:
        raise BodyRefused(f"JSON parse error: the body is nested deeper than {MAX_DEPTH} levels")
    return text


def loads(raw: bytes):
    """`json.loads` behind the limits; a syntax error is a BodyRefused too (position only)."""
    text = checked_text(raw)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BodyRefused(f"JSON parse error: {exc}") from None


def json_body(request: HttpRequest) -> str:
    """A plain Django view's body as checked text (Django refuses past the size limit)."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_large() from None
    return checked_text(raw)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser behind the limits; reads at most one byte past the size limit."""

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(max_body_bytes() + 1)
        checked_text(raw)
        return super().parse(io.BytesIO(raw), media_type, parser_context)
