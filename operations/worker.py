"""The operations' conversation with the generation backend: dispatch (the one create request
under the operation's Idempotency-Key), reconciliation of an unknown outcome, checks of
running work, applying an answer (billing settled or released), the owner's cancel (the
backend decides for acknowledged work) and the beat's batch of everything due. No
transaction spans a backend call."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import tracing
from core.lifecycle import Actor, IllegalTransition
from operations import billing, moves
from operations.backends.openai import (
    BackendResponse,
    NotSent,
    OpenAIResponses,
    OutcomeUnknown,
    Refused,
)
from operations.errors import NotCancellable
from operations.models import (
    BillingStatus,
    DispatchStatus,
    Operation,
    Stage,
    State,
)

logger = logging.getLogger(__name__)
S = State


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
            return moves.operation_transition(
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
        response = (client or moves.backend()).cancel(operation.backend_response_id)
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
        moves.operation_touch(operation_id, last_error=error)
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
                moves.operation_transition(
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
        moves.operation_transition(
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
        operation = moves.operation_transition(
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
        moves.operation_transition(
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
        max_output_tokens=moves.operation_max_output_tokens(operation),
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
        moves.operation_touch(operation.pk, dispatch_started_at=now)
    client = client or moves.backend()
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
            moves.operation_transition(
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
    client = client or moves.backend()
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
    client = client or moves.backend()
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
    client = client or moves.backend()
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
