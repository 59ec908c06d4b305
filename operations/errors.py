"""What the operations services refuse: each error carries the status and code its API answer
names (core.errors). Below both billing (which raises InsufficientCredits on a hold) and the
services."""

from __future__ import annotations

from core import errors


class AdmissionError(errors.Unprocessable):
    """Not admitted (or not quoted): the code says why."""

    code = "admission_failed"
    doc = "Not admitted (code says why), e.g. Quote not found"


class QuoteInvalid(AdmissionError):
    code = "quote_invalid"


class InsufficientCredits(AdmissionError):
    status = 402
    code = "insufficient_credits"
    doc = "Not enough credits for the hold"


class IdempotencyKeyReused(AdmissionError):
    code = "idempotency_key_reused"


class OperationNotFound(errors.NotFound):
    """A malformed id, another owner's or agent's operation: all answer like a missing one."""

    doc = "Operation not found: <id>"


class NotCancellable(errors.Conflict):
    code = "not_cancellable"
    doc = "Not cancellable in its state (detail says why)"


class ResultExpired(errors.Gone):
    code = "result_expired"
    doc = "The result expired at detail_expires_at"
