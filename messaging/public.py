"""messaging's public face: all that the layers above it (mcp_adapter, console) use of the app.

The tool contracts, the MCP task hooks, the console's stuck-work and search providers and the
staff moves' services. The rest of the app is private to it by convention; the code stays
in its modules and is re-exported or wrapped here (core/tests/test_public_faces.py holds
the layers above to this module)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from messaging import contract
from messaging.models import CANCELLABLE, Delivery, DeliveryStatus
from messaging.selectors import Forbidden, deliveries_stuck
from messaging.services import delivery_cancel, delivery_resolve_unknown

__all__ = [
    "CANCELLABLE",
    "DeliveryStatus",
    "Forbidden",
    "contract",
    "deliveries_needing_attention",
    "deliveries_search",
    "delivery_by_id",
    "delivery_cancel",
    "delivery_payload",
    "delivery_resolve_unknown",
]


def delivery_by_id(delivery_id) -> Delivery:
    """The delivery (Delivery.DoesNotExist if there is none): what an MCP task follows."""
    return Delivery.objects.get(pk=delivery_id)


def delivery_payload(delivery: Delivery) -> dict[str, Any]:
    """The status tool's answer for this delivery (the contract's action payload)."""
    return contract.action_payload(delivery)


def deliveries_needing_attention(*, now: datetime) -> tuple[tuple[QuerySet, ...], Any]:
    """Unknown, past its lease or overdue (`deliveries_stuck`); and how to say why."""

    def why(delivery: Delivery) -> str:
        if delivery.status == DeliveryStatus.UNKNOWN:
            return "outcome unknown"
        return "past its lease or overdue"

    return (deliveries_stuck(now),), why


def deliveries_search(*, shape: str, value: Any, term: str) -> list[tuple[str, QuerySet]]:
    """Exact, indexed lookups for a search term of this shape (core.admin.search_term_kind):
    (what was tried, the deliveries it finds)."""
    if shape == "uuid":
        return [
            ("delivery id", Delivery.objects.filter(pk=value)),
            ("idempotency key", Delivery.objects.filter(idempotency_key=value)),
        ]
    if shape == "text" and term:
        return [("provider message id", Delivery.objects.filter(provider_message_id=term))]
    return []
