"""Operations' test data, made through its services: shared by every app's tests (the console
lists these operations, the MCP adapter follows them)."""

from __future__ import annotations

from decimal import Decimal

from operations import billing
from operations.models import Operation
from operations.services import operation_submit


def fund(owner, amount: str = "100") -> None:
    """Grant `owner` credits (an operation is refused without them)."""
    billing.wallet_grant(owner=owner, amount=Decimal(amount), note="test grant")


def submit_operation(
    *,
    owner,
    application=None,
    category: str = "writing",
    input_text: str = "hello",
    tool: str = "text-gen",
    **extra,
) -> Operation:
    """An operation submitted as the API would (`sensitive` waits for review: no backend)."""
    return operation_submit(
        owner=owner,
        application=application,
        tool=tool,
        category=category,
        input_text=input_text,
        **extra,
    )
