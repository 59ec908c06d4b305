"""Errors the domain raises that a client may read: each carries its HTTP status, a stable
`code` and a message that is safe to show (no internal address, no secret).

Services raise a subclass; `core.api.exception_handler` turns any of them into the one error
body of the API (`{"detail", "code", "errors"}`), so a view has no try/except that only maps
one error to another. No Django or DRF here: the services of every layer may raise these.
"""

from __future__ import annotations

from typing import Any


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
