"""Why an operation was not admitted: each error carries the code its API answer names.
Below both billing (which raises InsufficientCredits on a hold) and the services."""

from __future__ import annotations


class AdmissionError(Exception):
    code = "admission_failed"


class QuoteInvalid(AdmissionError):
    code = "quote_invalid"


class InsufficientCredits(AdmissionError):
    code = "insufficient_credits"


class IdempotencyKeyReused(AdmissionError):
    code = "idempotency_key_reused"
