"""What the messaging services refuse, each with the status and code its API answer names."""

from __future__ import annotations

from core import errors


class NotFound(errors.NotFound):
    """Unknown, or not visible to this caller: both answer the same."""

    doc = "Delivery not found"


class Forbidden(errors.Forbidden):
    """Visible, but the caller's role does not allow this."""


class IdempotencyConflict(errors.Conflict):
    doc = "idempotency_key used with a different payload"
