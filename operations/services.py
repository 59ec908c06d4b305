"""Writes for operations: quotes, submission and admission, the expiry of details. Every state
change goes through `operation_transition` (operations/moves.py); the conversation with the
generation backend (dispatch, reconciliation, checks, the owner's cancel, the beat's batch) is
operations/worker.py. Both are re-exported here, so `operations.services` stays the one module
the app's views, tasks and tests write through."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.echo import named
from core.lifecycle import Actor, create, enqueue_on_commit
from operations import billing, moves
from operations.contract import MAX_OUTPUT_TOKENS_LIMIT, MIN_OUTPUT_TOKENS
from operations.errors import AdmissionError, IdempotencyKeyReused, QuoteInvalid
from operations.models import (
    OPERATION_LIFECYCLE,
    BillingStatus,
    Operation,
    Quote,
    Stage,
    State,
)
from operations.moves import (
    backend,
    operation_max_output_tokens,
    operation_touch,
    operation_transition,
    quote_max_output_tokens,
)
from operations.worker import (
    CANCELLABLE_BY_OWNER,
    UNREACHABLE,
    NotCancellable,
    backend_unreachable,
    operation_cancel_by_owner,
    operation_check,
    operation_dispatch,
    operation_reconcile,
    operations_process_due,
)

__all__ = [
    "CANCELLABLE_BY_OWNER",
    "DISPATCH_TASK",
    "UNREACHABLE",
    "NotCancellable",
    "backend",
    "backend_unreachable",
    "needs_review",
    "operation_cancel_by_owner",
    "operation_check",
    "operation_dispatch",
    "operation_max_output_tokens",
    "operation_reconcile",
    "operation_submit",
    "operation_touch",
    "operation_transition",
    "operations_expire_details",
    "operations_process_due",
    "quote_create",
    "quote_max_output_tokens",
]

logger = logging.getLogger(__name__)
S = State
DISPATCH_TASK = "operations.tasks.operation_dispatch"


def needs_review(*, tool: str, category: str) -> str | None:
    for rule in settings.OPERATIONS_REVIEW_RULES:
        kind, _, value = rule.partition(":")
        if (kind == "category" and value == category) or (kind == "tool" and value == tool):
            return rule
    return None


@transaction.atomic
def quote_create(
    *,
    owner,
    application=None,
    tool: str,
    submit_field: str,
    submit_value: str,
    model: str | None = None,
    operation_name: str | None = None,
    configuration: dict | None = None,
) -> Quote:
    configuration = configuration or {}
    max_tokens = configuration.get("max_output_tokens") or settings.OPERATIONS_MAX_OUTPUT_TOKENS
    # The contract says so too; a price must never be negative (a negative hold is refused by
    # the ledger's constraints, i.e. a 500 at submit time).
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int | float):
        raise QuoteInvalid("max_output_tokens must be a whole number of tokens")
    if (
        max_tokens != int(max_tokens)
        or not MIN_OUTPUT_TOKENS <= max_tokens <= MAX_OUTPUT_TOKENS_LIMIT
    ):
        raise QuoteInvalid(
            f"max_output_tokens must be between {MIN_OUTPUT_TOKENS} and {MAX_OUTPUT_TOKENS_LIMIT}"
        )
    quoted = billing.estimate(input_text=submit_value, max_output_tokens=int(max_tokens))
    if quoted < 0:
        raise QuoteInvalid(
            f"the quote came to {billing.fmt(quoted)} credits; it must not be negative"
        )
    breakdown = billing.estimate_breakdown(
        input_text=submit_value, max_output_tokens=int(max_tokens)
    )
    return Quote.objects.create(
        owner=owner,
        application=application,
        breakdown=breakdown,
        tool=tool,
        model=model,
        operation_name=operation_name,
        configuration=configuration,
        submit_field=submit_field,
        submit_value=submit_value,
        quoted_credits=quoted,
        expires_at=timezone.now() + timedelta(seconds=settings.OPERATIONS_QUOTE_TTL_SECONDS),
    )


@transaction.atomic
def operation_submit(
    *,
    owner,
    application,
    tool: str,
    category: str,
    channel: str = "api",
    model: str | None = None,
    input_text: str | None = None,
    quote_id=None,
    idempotency_key: str | None = None,
) -> Operation:
    """Admission: check the quote and the wallet, hold credits, then review or dispatch.

    With an `idempotency_key`, a start the owner's agent (`application`) already made with
    that key returns its operation (`operation.repeated` is True) instead of holding credits again; the same key
    for another quote is refused."""
    now = timezone.now()
    quote = None
    if quote_id is not None:
        # The quote's row lock serialises every start of one quote: one wins, the others
        # see it used (or, with the winner's key, get the winner's operation).
        # Another agent's quote of the same owner is as unknown as another owner's.
        quote = (
            Quote.objects.select_for_update()
            .filter(pk=quote_id, owner=owner, application=application)
            .first()
        )
        if quote is None:
            raise QuoteInvalid(f"Quote not found: {named(str(quote_id))}")
    if idempotency_key is not None:
        # Keys are the agent's own: another agent of the owner may use the same one.
        earlier = Operation.objects.filter(
            owner=owner, application=application, idempotency_key=idempotency_key
        ).first()
        if earlier is not None:
            if earlier.quote_id != (quote.pk if quote else None) or earlier.tool != tool:
                raise IdempotencyKeyReused(
                    f"The idempotency key {idempotency_key!r} was used for another request "
                    f"(operation {earlier.pk})"
                )
            earlier.repeated = True
            return earlier
    if quote is not None:
        if quote.expires_at is not None and quote.expires_at <= now:
            raise QuoteInvalid(f"Quote {quote_id} expired at {quote.expires_at.isoformat()}")
        if Operation.objects.filter(quote=quote).exists():
            raise QuoteInvalid(f"Quote {quote_id} was already used")
        if quote.tool != tool:
            raise QuoteInvalid(f"Quote {quote_id} is for the tool {quote.tool!r}, not {tool!r}")
        input_text, model = quote.submit_value, quote.model or model
        max_output_tokens = moves.quote_max_output_tokens(quote)
        held = billing.q(quote.quoted_credits or 0)
        if held < 0:  # a quote stored before prices were checked: never a negative hold
            raise QuoteInvalid(f"Quote {quote_id} has a negative price; ask for a new quote")
    else:
        if not input_text:
            raise AdmissionError("input is required without a quote")
        max_output_tokens = settings.OPERATIONS_MAX_OUTPUT_TOKENS
        held = billing.estimate(input_text=input_text, max_output_tokens=max_output_tokens)
    rule = needs_review(tool=tool, category=category)
    try:
        with transaction.atomic():  # a savepoint: a same-key start that won first is no error
            operation = _admit(
                owner=owner,
                application=application,
                tool=tool,
                category=category,
                channel=channel,
                model=model,
                input_text=input_text,
                quote=quote,
                idempotency_key=idempotency_key,
                max_output_tokens=max_output_tokens,
                held=held,
                review_rule=rule,
                now=now,
            )
    except IntegrityError:
        earlier = Operation.objects.filter(
            owner=owner, application=application, idempotency_key=idempotency_key
        ).first()
        if idempotency_key is None or earlier is None:
            raise
        earlier.repeated = True
        return earlier
    operation.repeated = False
    return operation


def _admit(
    *,
    owner,
    application,
    tool,
    category,
    channel,
    model,
    input_text,
    quote,
    idempotency_key,
    max_output_tokens: int,
    held,
    review_rule: str | None,
    now,
) -> Operation:
    rule = review_rule
    operation = create(
        lifecycle=OPERATION_LIFECYCLE,
        actor=Actor.agent(),
        detail=f"admitted; {billing.fmt(held)} credits held",
        values={
            "owner": owner,
            "application": application,
            "tool": tool,
            "category": category,
            "channel": channel,
            "model": model or settings.OPERATIONS_DEFAULT_MODEL,
            "input": {"text": input_text},
            "quote": quote,
            "idempotency_key": idempotency_key,
            "max_output_tokens": max_output_tokens,
            "state": S.QUEUED,
            "status": "accepted",
            "stage": Stage.ADMISSION if rule else Stage.DISPATCH,
            "billing_status": BillingStatus.PENDING if held > 0 else BillingStatus.NONE,
            "held_credits": held,
            "pending_credits": held,
            "created_at": now,
        },
    )
    # In the same transaction as the row: no hold, no operation (InsufficientCredits).
    billing.hold(operation=operation, amount=held)
    if rule:
        return moves.operation_transition(
            operation_id=operation.pk,
            to=S.NEEDS_REVIEW,
            actor=Actor.system(),
            detail=f"review required by rule {rule}",
            updates={
                "review": {
                    "reason": "policy",
                    "rule": rule,
                    "requested_at": now.isoformat(),
                    "decision": None,
                }
            },
        )
    enqueue_on_commit(DISPATCH_TASK, operation.pk)
    return operation


def operations_expire_details(*, now=None) -> int:
    """Drop stored result and review details past detail_expires_at; the record (and its
    history, the audit trail) remains. Each one is a visible change, so each is published."""
    now = now or timezone.now()
    expired = 0
    for pk in Operation.objects.filter(detail_expires_at__lt=now, detail_expired=False).values_list(
        "pk", flat=True
    ):
        expired += moves.operation_touch(pk, result=None, review=None, detail_expired=True)
    return expired
