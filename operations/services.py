"""Writes for operations. Every state change goes through `operation_transition`."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core import tracing
from core.echo import named
from core.lifecycle import (
    Actor,
    IllegalTransition,
    create,
    enqueue_on_commit,
    touch,
    transition,
)
from operations import billing
from operations.backends.openai import (
    BackendResponse,
    NotSent,
    OpenAIResponses,
    OutcomeUnknown,
    Refused,
)
from operations.contract import MAX_OUTPUT_TOKENS_LIMIT, MIN_OUTPUT_TOKENS
from operations.errors import (
    AdmissionError,
    IdempotencyKeyReused,
    NotCancellable,
    QuoteInvalid,
)
from operations.models import (
    OPERATION_LIFECYCLE,
    STATE_TABLE,
    BillingStatus,
    DispatchStatus,
    Operation,
    Quote,
    Stage,
    State,
)

logger = logging.getLogger(__name__)
S = State
DISPATCH_TASK = "operations.tasks.operation_dispatch"


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
        max_output_tokens = quote_max_output_tokens(quote)
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
        return operation_transition(
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


# What the owner may cancel: work the backend has not finished. A waiting one (queued at the
# backend) is cancelled there first; its answer decides (it may have completed meanwhile).
CANCELLABLE_BY_OWNER = frozenset({S.QUEUED, S.WAITING, S.PAUSED, S.NEEDS_REVIEW})


def operation_cancel_by_owner(
    *, operation_id, owner, application, client: OpenAIResponses | None = None
) -> Operation:
    """The owner's cancel, by the agent (OAuth application) that started it: queued (not yet
    sent), needs_review, paused or waiting → cancelled, the hold released. Raises
    NotCancellable with the reason otherwise (a TransitionRefused if it moved meanwhile);
    Operation.DoesNotExist for another agent's."""
    try:
        return _cancel_by_owner(
            operation_id=operation_id, owner=owner, application=application, client=client
        )
    except IllegalTransition as exc:  # it moved meanwhile
        raise exc.refused(
            f"Operation {operation_id} is {exc.current} now", code=NotCancellable.code
        ) from exc


def _cancel_by_owner(*, operation_id, owner, application, client) -> Operation:
    actor = Actor.agent()
    with transaction.atomic():
        operation = (
            Operation.objects.select_for_update()
            .filter(pk=operation_id, owner=owner, application=application)
            .get()
        )
        if operation.state not in CANCELLABLE_BY_OWNER:
            raise NotCancellable(
                f"Operation {operation_id} is {operation.state}; only a queued, waiting, paused "
                "or needs_review operation can be cancelled"
            )
        if operation.dispatch_status == DispatchStatus.PENDING:
            if operation.state == S.QUEUED and operation.next_check_at > timezone.now():
                # A worker holds the dispatch claim: its request may be reaching the backend.
                raise NotCancellable(
                    f"Operation {operation_id} is being sent to the backend; try again shortly"
                )
            return operation_transition(
                operation_id=operation.pk,
                to=S.CANCELLED,
                actor=actor,
                detail="cancelled by its owner",
                updates={
                    "review": None,
                    "paused_from": "",
                    **billing.release_hold(operation=operation),
                },
                only_from={operation.state},
            )
        if operation.dispatch_status != DispatchStatus.ACKNOWLEDGED:
            raise NotCancellable(f"Operation {operation_id} is being reconciled; try again later")
        if operation.state == S.PAUSED:
            raise NotCancellable(
                f"Operation {operation_id} was paused by staff while generating; staff resume "
                "or cancel it"
            )
    # Acknowledged (waiting, or paused after it): the backend decides, no lock across the call.
    try:
        response = (client or backend()).cancel(operation.backend_response_id)
    except (NotSent, OutcomeUnknown, Refused) as exc:
        raise NotCancellable(f"The backend could not be asked to cancel: {exc}") from None
    _finish(operation, response, actor)
    return Operation.objects.get(pk=operation.pk)


# How a backend problem before anything was sent (connection refused, no route, TLS) begins in
# `last_error`: the work cannot have reached the generation service, so a reader can say "it
# cannot be reached" rather than "the outcome is unknown".
UNREACHABLE = "the generation service could not be reached; nothing was sent"


def _unreachable(exc: NotSent) -> str:
    return f"{UNREACHABLE} ({exc})"


def backend_unreachable(operation: Operation) -> bool:
    """Whether the worker's last call to the backend for `operation` could not connect."""
    return operation.last_error.startswith(UNREACHABLE)


def _touch(operation_id, **changes: Any) -> bool:
    """A visible change without a transition: bumps `updated_at` and is published."""
    return touch(lifecycle=OPERATION_LIFECYCLE, pk=operation_id, changes=changes)


def _still_in(operation_id, states) -> bool:
    """Lock the row and say whether it is still in one of `states` (call inside atomic)."""
    return (
        Operation.objects.select_for_update()
        .filter(pk=operation_id, state__in=list(states))
        .exists()
    )


def _check_later(operation_id, *, error: str, while_in) -> bool:
    """Record the backend problem (or clear it) and when to look again, only if the operation
    is still where this worker found it: a worker that lost a race writes nothing."""
    with transaction.atomic():
        if not _still_in(operation_id, while_in):
            return False
        # Bookkeeping nobody sees: when the beat looks again (it also ends a dispatch claim).
        Operation.objects.filter(pk=operation_id).update(
            next_check_at=timezone.now() + timedelta(seconds=settings.OPERATIONS_POLL_SECONDS)
        )
        _touch(operation_id, last_error=error)
    return True


def _finish(operation: Operation, response: BackendResponse, actor: Actor) -> str:
    """Apply a backend answer to an acknowledged operation."""
    if response.status == "queued":
        target, detail = S.WAITING, "the backend has it queued"
    elif response.status == "in_progress":
        target, detail = S.RUNNING, "the backend is generating"
    else:
        target = None
    if target is not None:
        if operation.state != target:
            try:
                operation_transition(
                    operation_id=operation.pk,
                    to=target,
                    actor=actor,
                    detail=detail,
                    only_from={operation.state},
                )
            except IllegalTransition:
                return "raced"
        if not _check_later(operation.pk, error="", while_in={target}):
            return "raced"
        return target
    with transaction.atomic():
        locked = Operation.objects.select_for_update().get(pk=operation.pk)
        if locked.is_terminal or locked.state == S.PAUSED:
            return "not_due"
        now = timezone.now()
        updates: dict[str, Any] = {"completed_at": now, "last_error": ""}
        if response.status == "completed":
            to = S.SUCCEEDED
            updates["result"] = {"output_text": response.output_text, "response_id": response.id}
            updates.update(
                billing.settle(
                    operation=locked, usage=response.usage, source_id=response.id, evidence_at=now
                )
            )
            detail = f"completed; {updates['usage_credits']} credits used"
        elif response.status == "incomplete":
            # Cut at the quoted limit (or a content filter): the backend did the work and
            # bills it, so the usage is settled from the hold like a completed answer's.
            to = S.FAILED
            updates["error_code"] = response.error_code
            updates["result"] = {
                "output_text": response.output_text,
                "response_id": response.id,
                "incomplete_reason": response.error_code,
            }
            updates.update(
                billing.settle(
                    operation=locked, usage=response.usage, source_id=response.id, evidence_at=now
                )
            )
            detail = (
                f"backend incomplete: {response.error_code}; {updates['usage_credits']} "
                "credits used"
            )
        else:
            to = S.CANCELLED if response.status == "cancelled" else S.FAILED
            updates["error_code"] = response.error_code if to == S.FAILED else None
            updates.update(billing.release_hold(operation=locked))
            detail = f"backend {response.status}: {response.error_code}"
        operation_transition(
            operation_id=locked.pk,
            to=to,
            actor=actor,
            detail=detail,
            payload=response.raw,
            updates=updates,
            only_from={locked.state},
        )
    return to


def _acknowledged(
    operation: Operation, response: BackendResponse, actor: Actor, *, detail: str
) -> str:
    """`operation` is as this worker found it (queued or reconciling): if another worker or
    staff moved it since, the move below is refused and this worker stands down."""
    now = timezone.now()
    target = S.WAITING if response.status == "queued" else S.RUNNING
    try:
        operation = operation_transition(
            operation_id=operation.pk,
            to=target,
            actor=actor,
            payload=response.raw,
            detail=f"{detail}: backend response {response.id} ({response.status})",
            only_from={operation.state},
            updates={
                "dispatch_status": DispatchStatus.ACKNOWLEDGED,
                "acknowledged_at": now,
                "backend_response_id": response.id,
                "billing_status": BillingStatus.PENDING
                if operation.pending_credits > 0
                else BillingStatus.NONE,
                "next_check_at": now + timedelta(seconds=settings.OPERATIONS_POLL_SECONDS),
                "last_error": "",
            },
        )
    except IllegalTransition:
        return "raced"
    if response.status in ("queued", "in_progress"):
        return target
    return _finish(operation, response, actor)


def _fail_and_release(
    operation: Operation, *, code: str, detail: str, payload: Any, actor: Actor
) -> str:
    """Fail an operation still where this worker found it (queued or reconciling)."""
    with transaction.atomic():
        locked = Operation.objects.select_for_update().get(pk=operation.pk)
        if locked.state != operation.state:
            return "raced"
        operation_transition(
            operation_id=locked.pk,
            to=S.FAILED,
            actor=actor,
            detail=detail,
            payload=payload,
            updates={"error_code": code, **billing.release_hold(operation=locked)},
            only_from={locked.state},
        )
    return S.FAILED


def _create(client: OpenAIResponses, operation: Operation) -> BackendResponse:
    """The one create request: dispatch and reconciliation must send the same body under the
    same Idempotency-Key, or the backend could start the work twice."""
    return client.create(
        idempotency_key=str(operation.pk),
        model=operation.model,
        input=operation.input.get("text", ""),
        metadata={"operation_id": str(operation.pk), "tool": operation.tool},
        # The hold priced this many tokens at most; the backend stops there.
        max_output_tokens=operation_max_output_tokens(operation),
    )


def _dispatch_lease() -> timedelta:
    # Longer than one create call can take (connect, then the answer), so the beat does not
    # post again while the worker holding the claim still waits for its acknowledgement.
    return timedelta(seconds=2 * settings.OPERATIONS_BACKEND_TIMEOUT_SECONDS + 5)


def operation_dispatch(*, operation_id, client: OpenAIResponses | None = None) -> str:
    """queued → acknowledged (running/waiting) | reconciling (outcome unknown) | failed.
    No transaction spans the backend call."""
    now = timezone.now()
    # The claim: the on-commit task and the beat may both get here for the same operation
    # (e.g. right after a review approval). One conditional UPDATE wins; the other is a
    # no-op. `next_check_at` is the lease: if this worker dies, the beat dispatches again
    # later with the same Idempotency-Key.
    claimed = Operation.objects.filter(
        pk=operation_id,
        state=S.QUEUED,
        stage=Stage.DISPATCH,
        dispatch_status=DispatchStatus.PENDING,
        next_check_at__lte=now,
    ).update(next_check_at=now + _dispatch_lease())
    if claimed != 1:
        return "not_due"
    operation = Operation.objects.get(pk=operation_id)
    if operation.dispatch_started_at is None:
        _touch(operation.pk, dispatch_started_at=now)
    client = client or backend()
    worker = Actor.worker()
    try:
        response = _create(client, operation)
    except NotSent as exc:
        # Nothing left: the backend cannot have it, so there is nothing to reconcile and it
        # stays queued (the owner may still cancel); the beat sends it again, under the same
        # Idempotency-Key, once the backend is back.
        recorded = _check_later(operation.pk, error=_unreachable(exc), while_in={S.QUEUED})
        return "retry" if recorded else "raced"
    except Refused as exc:
        code = (
            (exc.payload or {}).get("error", {}).get("code")
            if isinstance(exc.payload, dict)
            else None
        )
        return _fail_and_release(
            operation,
            code=code or "dispatch_rejected",
            detail=f"backend refused: {exc}",
            payload=exc.payload,
            actor=worker,
        )
    except OutcomeUnknown as exc:
        try:
            operation_transition(
                operation_id=operation.pk,
                to=S.RECONCILING,
                actor=worker,
                payload=exc.payload,
                detail=f"dispatch outcome unknown ({exc}); asking the backend",
                only_from={S.QUEUED},
                updates={
                    "dispatch_status": DispatchStatus.UNKNOWN,
                    "billing_status": BillingStatus.RECONCILING,
                    "last_error": str(exc),
                    # End the dispatch claim: reconcile at the next poll.
                    "next_check_at": timezone.now()
                    + timedelta(seconds=settings.OPERATIONS_POLL_SECONDS),
                },
            )
        except IllegalTransition:
            return "raced"
        return S.RECONCILING
    return _acknowledged(operation, response, worker, detail="acknowledged")


def operation_reconcile(*, operation_id, client: OpenAIResponses | None = None) -> str:
    """reconciling: ask the backend again with the same Idempotency-Key; it answers with the
    response it has (or creates it, if the first request never arrived)."""
    operation = Operation.objects.get(pk=operation_id)
    if operation.state != S.RECONCILING:
        return "not_due"
    client = client or backend()
    try:
        response = _create(client, operation)
    except (NotSent, OutcomeUnknown) as exc:
        error = _unreachable(exc) if isinstance(exc, NotSent) else str(exc)
        if not _check_later(operation.pk, error=error, while_in={S.RECONCILING}):
            return "raced"
        return "still_reconciling"
    except Refused as exc:
        return _fail_and_release(
            operation,
            code="dispatch_rejected",
            detail=f"backend refused on reconciliation: {exc}",
            payload=exc.payload,
            actor=Actor.worker(),
        )
    return _acknowledged(operation, response, Actor.worker(), detail="reconciled")


def operation_check(*, operation_id, client: OpenAIResponses | None = None) -> str:
    """running/waiting: fetch the backend response and apply it."""
    operation = Operation.objects.get(pk=operation_id)
    if operation.state not in (S.RUNNING, S.WAITING) or not operation.backend_response_id:
        return "not_due"
    client = client or backend()
    try:
        response = client.retrieve(operation.backend_response_id)
    except (NotSent, OutcomeUnknown, Refused) as exc:
        error = _unreachable(exc) if isinstance(exc, NotSent) else str(exc)
        if not _check_later(operation.pk, error=error, while_in={S.RUNNING, S.WAITING}):
            return "raced"
        return "unavailable"
    return _finish(operation, response, Actor.worker())


def operations_process_due(*, client: OpenAIResponses | None = None, limit: int = 50) -> Counter:
    """Beat: everything due. One operation another worker (or staff) moved first is a no-op
    counted as `raced`; it never stops the rest of the batch."""
    client = client or backend()
    now = timezone.now()
    outcomes: Counter = Counter()
    due = Operation.objects.filter(next_check_at__lte=now).order_by("next_check_at")
    for pk, state, trace_id in due.filter(
        state__in=(S.QUEUED, S.RUNNING, S.WAITING, S.RECONCILING)
    ).values_list("pk", "state", "trace_id")[:limit]:
        # Each operation in the trace of the request that created it.
        with tracing.adopt(trace_id), tracing.bind(operation_id=pk):
            try:
                if state == S.QUEUED:
                    outcome = operation_dispatch(operation_id=pk, client=client)
                elif state == S.RECONCILING:
                    outcome = operation_reconcile(operation_id=pk, client=client)
                else:
                    outcome = operation_check(operation_id=pk, client=client)
            except IllegalTransition as exc:
                # The services stand down on the races they know; this is the backstop.
                logger.info("operation %s: lost a race (%s); left to the winner", pk, exc)
                outcome = "raced"
        outcomes[outcome] += 1
    return outcomes


def operations_expire_details(*, now=None) -> int:
    """Drop stored result and review details past detail_expires_at; the record (and its
    history, the audit trail) remains. Each one is a visible change, so each is published."""
    now = now or timezone.now()
    expired = 0
    for pk in Operation.objects.filter(detail_expires_at__lt=now, detail_expired=False).values_list(
        "pk", flat=True
    ):
        expired += _touch(pk, result=None, review=None, detail_expired=True)
    return expired
