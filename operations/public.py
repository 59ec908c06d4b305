"""operations' public face: all that the layers above it (mcp_adapter, console) use of the app.

The tool contracts, the console's stuck-work and search providers and the staff moves'
services. The rest of the app is private to it by convention; the code stays in its
modules and is re-exported or wrapped here (core/tests/test_public_faces.py holds the
layers above to this module)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from operations import contract
from operations.decisions import (
    CANCELLABLE_BY_STAFF,
    operation_cancel,
    operation_pause,
    operation_resume,
    operation_review_decide,
)
from operations.models import BillingStatus, DispatchStatus, Operation, Quote, State
from operations.selectors import operations_stuck
from operations.serializers import operation_status_payload
from operations.services import NotCancellable, backend_unreachable, operation_cancel_by_owner

__all__ = [
    "CANCELLABLE_BY_STAFF",
    "BillingStatus",
    "DispatchStatus",
    "NotCancellable",
    "State",
    "backend_unreachable",
    "contract",
    "operation_cancel",
    "operation_cancel_by_owner",
    "operation_for_task",
    "operation_status_payload",
    "operation_pause",
    "operation_resume",
    "operation_review_decide",
    "operations_needing_attention",
    "operations_search",
    "quotes_unused",
]

# Waiting for staff whatever their age.
_WAITING_FOR_STAFF = (State.NEEDS_REVIEW, State.RECONCILING, State.PAUSED)


def operations_needing_attention(
    *, now: datetime, hold_cutoff: datetime
) -> tuple[tuple[QuerySet, ...], Any]:
    """Running too long, waiting for staff (review, reconciling, paused), or holding credits
    since before `hold_cutoff`; and how to say why one is listed."""
    unfinished = [s for s in State.values if s not in Operation.lifecycle.terminal]
    found = operations_stuck(now=now) | Operation.objects.filter(
        Q(state__in=_WAITING_FOR_STAFF)
        | Q(
            billing_status=BillingStatus.PENDING,
            created_at__lt=hold_cutoff,
            state__in=unfinished,
        )
    )

    def why(operation: Operation) -> str:
        if operation.state in _WAITING_FOR_STAFF:
            return operation.state.replace("_", " ")
        if operation.state in (State.RUNNING, State.WAITING) and operation.updated_at < now - (
            timedelta(minutes=settings.OPERATIONS_STUCK_RUNNING_MINUTES)
        ):
            return "running too long"
        return "credit hold pending too long"

    return (found,), why


def operations_search(*, shape: str, value: Any, term: str) -> list[tuple[str, QuerySet]]:
    """Exact, indexed lookups for a search term of this shape (core.admin.search_term_kind):
    (what was tried, the operations it finds)."""
    if shape == "uuid":
        return [
            ("operation id", Operation.objects.filter(pk=value)),
            ("quote id", Operation.objects.filter(quote_id=value)),
        ]
    if shape == "text" and term:
        return [("backend response id", Operation.objects.filter(backend_response_id=term))]
    return []


def quotes_unused(*, quote_id) -> list[Quote]:
    """The quote with this id if no operation used it yet (at most one)."""
    return list(Quote.objects.filter(pk=quote_id, used_by__isnull=True)[:1])


def operation_for_task(operation_id) -> Operation:
    """The operation an MCP task follows (tong_operation_start), with its quote for the
    status payload."""
    return Operation.objects.select_related("quote").get(pk=operation_id)
