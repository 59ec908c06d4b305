"""Errors the domain raises that a client may read: each carries its HTTP status, a stable
`code` and a message that is safe to show (no internal address, no secret).

Services raise a subclass; `core.api.exception_handler` turns any of them into the one error
body of the API (`{"detail", "code", "errors"}`), so a view has no try/except that only maps
one error to another. No Django or DRF here: the services of every layer may raise these.
"""

from __future__ import annotations

import re
from typing import Any

INVALID_INPUT = "Invalid input"


class DomainError(Exception):
    """A refusal a client reads: `status`, `code`, the message and field `errors`; `extra`
    keys go into the body beside them."""

    status: int = 400
    code: str = "invalid"
    # What the OpenAPI says of this answer when a view does not say more (core.api.errors_doc).
    doc: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        errors: dict[str, list[str]] | None = None,
        **extra: Any,
    ):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.errors = errors or {}
        self.extra = extra


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Forbidden(DomainError):
    status = 403
    code = "permission_denied"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class Gone(DomainError):
    status = 410
    code = "gone"


class Unprocessable(DomainError):
    status = 422
    code = "unprocessable"


class Unavailable(DomainError):
    """A dependency (a chain, a provider) did not answer: a retry may succeed (Retry-After)."""

    status = 503
    code = "unavailable"


# What an error from a dependency may carry that a client must not see: URLs, host:port pairs,
# IP addresses, urllib3's "host='…', port=…" and object reprs. A CAIP id ("eip155:31337/…")
# looks like host:port but is what the client sent: kept.
_INTERNALS = re.compile(
    r"[a-z][a-z0-9+.-]*://\S+"
    r"|\bhost='[^']*'(, port=\d+)?"
    r"|<[^<>]* object at 0x[0-9a-f]+>"
    r"|\[[0-9a-f:.]+\](:\d+)?"
    r"|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"
    r"|\blocalhost(:\d+)?\b"
    r"|\b(?!eip155:)[a-z][a-z0-9-]*(\.[a-z0-9-]+)*:\d{2,5}\b",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` without internal addresses, for an error a client reads (the log keeps all)."""
    return _INTERNALS.sub("<internal>", text)
