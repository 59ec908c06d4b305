"""Demo data for `manage.py seed_demo`: credits and a few operations for the worker to run
against the local Responses API that `make run` starts."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from operations import billing
from operations.models import LedgerEntry, Operation
from operations.services import operation_submit

DEMO_OPERATIONS = [
    ("writing", "Write a short welcome note for new Picnic users."),
    ("sensitive", "Draft a reply to a customer complaint (needs review)."),
    ("writing", "[lose-ack] Summarise this week's card spending."),
]


def seed_operations(*, user, application, say: Callable[[str], None]) -> None:
    if not LedgerEntry.objects.filter(wallet__owner=user, kind="grant").exists():
        billing.wallet_grant(owner=user, amount=Decimal("250"), note="demo credits")
    if Operation.objects.filter(owner=user).exists():
        say(f"operations: {Operation.objects.filter(owner=user).count()} already there")
        return
    for category, text in DEMO_OPERATIONS:
        op = operation_submit(
            owner=user, application=application, tool="text-gen", category=category, input_text=text
        )
        say(f"operation {op.pk} ({category}): {op.state}")
