"""A view's own read, run in the statement that reads the request's bearer token.

The API's token check is a database read before the view runs; a view whose answer is one
more read (get_action_status) would make two round trips to PostgreSQL per request. Around
its authentication the view names its statement (`read_with_token`); the token validator
(`oauth.validators`) reads the token and that statement's row in one statement and leaves the
row here. The row must not depend on the token: the view still checks the row against the
token's user and application itself, after authentication and the scope check, so every
answer (401, 403, 404) is decided in the same order as before. When nothing ran it (no bearer
token, a database without the combined statement), `read` stays False and the view reads
its row as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class TokenCompanion:
    sql: str
    params: list
    read: bool = False
    row: tuple | None = None  # None once read: the statement found no row


_COMPANION: ContextVar[TokenCompanion | None] = ContextVar("token_companion", default=None)


@contextmanager
def read_with_token(sql: str, params: list) -> Iterator[TokenCompanion]:
    companion = TokenCompanion(sql, list(params))
    reset = _COMPANION.set(companion)
    try:
        yield companion
    finally:
        _COMPANION.reset(reset)


def token_companion() -> TokenCompanion | None:
    """The statement to run with the token read, if a view named one and none ran it yet."""
    companion = _COMPANION.get()
    return companion if companion is not None and not companion.read else None
