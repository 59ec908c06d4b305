"""tong_operation_status: the seed's response, built field by field."""

from __future__ import annotations

from typing import Any

from core.formats import rfc3339
from operations.billing import fmt
from operations.models import Operation


def _ms(start, end) -> int | None:
    if start is None or end is None:
        return None
    return max(int((end - start).total_seconds() * 1000), 0)


def operation_status_payload(op: Operation) -> dict[str, Any]:
    billing: dict[str, Any] = {
        "status": op.billing_status,
        "usage_credits": fmt(op.usage_credits),
        "wallet_debited_credits": fmt(op.wallet_debited_credits),
        "released_credits": fmt(op.released_credits),
        "refunded_credits": fmt(op.refunded_credits),
        "unfunded_credits": fmt(op.unfunded_credits),
        "pending_credits": fmt(op.pending_credits),
    }
    if op.tokens is not None:
        billing["tokens"] = op.tokens
    components = list(op.components.all())
    if components:
        billing["components"] = [
            {
                "id": str(c.pk),
                "source_id": c.source_id,
                "tool": c.tool,
                "model": c.model,
                "channel": c.channel,
                "credential_id": c.credential_id,
                "kind": c.kind,
                "usage_credits": fmt(c.usage_credits),
                "wallet_debited_credits": fmt(c.wallet_debited_credits),
                **({"evidence_at": rfc3339(c.evidence_at)} if c.evidence_at else {}),
                "updated_at": rfc3339(c.updated_at),
            }
            for c in components
        ]
    payload: dict[str, Any] = {
        "id": str(op.id),
        "tool": op.tool,
        "category": op.category,
        "channel": op.channel,
        "state": op.state,
        "status": op.status,
        "stage": op.stage,
        "dispatch_status": op.dispatch_status,
        "created_at": rfc3339(op.created_at),
        "updated_at": rfc3339(op.updated_at),
        "detail_expires_at": rfc3339(op.detail_expires_at),
        "detail_expired": op.detail_expired,
        "timing": {
            "dispatch_started_at": rfc3339(op.dispatch_started_at),
            "acknowledged_at": rfc3339(op.acknowledged_at),
            "completed_at": rfc3339(op.completed_at),
            "dispatch_acknowledgement_ms": _ms(op.dispatch_started_at, op.acknowledged_at),
            "end_to_end_ms": _ms(op.created_at, op.completed_at),
        },
        "review": op.review,
        "result": op.result,
        "error": {"code": op.error_code} if op.error_code else None,
        "billing": billing,
    }
    if op.quote_id:
        quote = quote_payload(op.quote)
        payload["quote"] = {"id": quote.pop("id"), "operation_id": str(op.id), **quote}
    return payload


def quote_payload(quote) -> dict[str, Any]:
    return {
        "id": str(quote.id),
        "tool": quote.tool,
        "operation": quote.operation_name,
        "model": quote.model,
        "configuration": quote.configuration,
        "submit_value": quote.submit_value,
        "submit_field": quote.submit_field,
        "quoted_credits": None if quote.quoted_credits is None else fmt(quote.quoted_credits),
        "expires_at": rfc3339(quote.expires_at),
    }
