"""What every operations service and the worker share: the one state change
(`operation_transition`), a visible change without one (`operation_touch`), the backend client
and the answer's token limit an operation was priced for. The services and the worker call
them through this module (`moves.operation_transition(…)`), so a test that wraps one wraps it
for every caller."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from core.lifecycle import Actor, touch, transition
from operations.backends.openai import OpenAIResponses
from operations.models import OPERATION_LIFECYCLE, STATE_TABLE, Operation, Quote


def operation_transition(
    *,
    operation_id,
    to: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    updates: dict[str, Any] | None = None,
    only_from: set[str] | None = None,
    stage: str | None = None,
) -> Operation:
    """Move the state; status and stage follow from STATE_TABLE (the database checks it too).
    A terminal state also sets `completed_at` and `detail_expires_at` (OPERATION_LIFECYCLE)."""
    status, stages = STATE_TABLE[to]
    stage = stage or stages[0]
    if stage not in stages:
        raise ValueError(f"stage {stage!r} does not go with state {to!r}")
    return transition(
        lifecycle=OPERATION_LIFECYCLE,
        pk=operation_id,
        to=to,
        actor=actor,
        detail=detail,
        payload=payload,
        updates={**(updates or {}), "status": status, "stage": stage},
        only_from=only_from,
    )


def backend() -> OpenAIResponses:
    return OpenAIResponses(
        settings.OPERATIONS_BACKEND_URL,
        api_key=settings.OPERATIONS_BACKEND_API_KEY,
        timeout=settings.OPERATIONS_BACKEND_TIMEOUT_SECONDS,
    )


def operation_touch(operation_id, **changes: Any) -> bool:
    """A visible change without a transition: bumps `updated_at` and is published."""
    return touch(lifecycle=OPERATION_LIFECYCLE, pk=operation_id, changes=changes)


def quote_max_output_tokens(quote: Quote) -> int:
    """The answer's token budget a quote priced (the default when it named none)."""
    return int(
        (quote.configuration or {}).get("max_output_tokens")
        or settings.OPERATIONS_MAX_OUTPUT_TOKENS
    )


def operation_max_output_tokens(operation: Operation) -> int:
    """The limit sent to the backend: the one the hold was priced for."""
    if operation.max_output_tokens is not None:
        return operation.max_output_tokens
    if operation.quote is not None:  # a row from before the limit was stored
        return quote_max_output_tokens(operation.quote)
    return settings.OPERATIONS_MAX_OUTPUT_TOKENS
