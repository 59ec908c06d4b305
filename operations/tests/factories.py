"""Operations' test data, made through its services: shared by every app's tests (the console
lists these operations, the MCP adapter follows them)."""

from __future__ import annotations

from decimal import Decimal

from core.lifecycle import Actor
from operations import billing
from operations.models import DispatchStatus, Operation, State
from operations.services import operation_submit, operation_transition


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


def make_dispatch_unknown(operation: Operation) -> Operation:
    """`operation` as a dispatch whose outcome is unknown leaves it: reconciling."""
    return operation_transition(
        operation_id=operation.pk,
        to=State.RECONCILING,
        actor=Actor.worker(),
        updates={"dispatch_status": DispatchStatus.UNKNOWN, "billing_status": "reconciling"},
    )
