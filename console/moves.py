"""The moves staff make in bulk from the console: each one the existing single-item staff
service of its app, its permission, and whether it is legal for an entity now.

A move never changes a status itself: the services go through `transition()`, which writes
one history row with the staff user (Actor.staff) and the note."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actions.public import (
    IN_FLIGHT,
    ActionResolutionError,
    action_mark_failed,
    action_reconcile_now,
    action_resend,
)
from core.lifecycle import IllegalTransition
from messaging.public import CANCELLABLE, Forbidden, delivery_cancel, delivery_resolve_unknown
from messaging.public import DeliveryStatus as D
from operations.public import (
    CANCELLABLE_BY_STAFF,
    DispatchStatus,
    State,
    operation_cancel,
    operation_pause,
    operation_resume,
    operation_review_decide,
)

# What a service raises when the move is (no longer) legal or its input is refused: reported
# for that row, the other rows go on.
REFUSALS = (IllegalTransition, ActionResolutionError, ValueError, Forbidden)


@dataclass(frozen=True)
class Move:
    name: str  # "kind:verb", the form's value
    kind: str
    label: str
    permission: str
    # None when legal for this entity now, else why not
    refusal: Callable[[Any], str | None]
    apply: Callable[..., Any]  # (entity, staff_user, note, extra) -> outcome text
    needs_message_id: bool = False


def _in_flight(action) -> str | None:
    if action.status in IN_FLIGHT:
        return None
    return f"it is {action.status}; only in-flight actions (signed, submitted, broadcast)"


def _status_in(allowed, what: str):
    def refusal(entity) -> str | None:
        status = entity.current_status
        return None if status in allowed else f"it is {status}; only {what}"

    return refusal


def _cancellable_operation(operation) -> str | None:
    if operation.state not in CANCELLABLE_BY_STAFF:
        return f"it is {operation.state}; only queued, in review or paused work is cancelled"
    if operation.dispatch_status != DispatchStatus.PENDING:
        return "the backend has it (pause it instead)"
    return None


def _pausable(operation) -> str | None:
    allowed = {State.QUEUED, State.NEEDS_REVIEW, State.RUNNING, State.WAITING}
    return _status_in(allowed, "queued, in review, running or waiting")(operation)


def _reconcile(action, user, note, extra) -> str:
    outcome = action_reconcile_now(action_id=action.pk, staff_user=user, note=note)
    return f"reconciled ({outcome})"


def _resend(action, user, note, extra) -> str:
    outcome = action_resend(action_id=action.pk, staff_user=user, note=note)
    return f"re-sent ({outcome})"


def _mark_failed(action, user, note, extra) -> str:
    action_mark_failed(action_id=action.pk, staff_user=user, note=note)
    return "marked failed"


def _resolve(outcome: str):
    def apply(delivery, user, note, extra) -> str:
        delivery_resolve_unknown(
            delivery_id=delivery.pk,
            staff_user=user,
            outcome=outcome,
            note=note,
            provider_message_id=extra.get("provider_message_id"),
        )
        return f"resolved as {outcome}"

    return apply


def _cancel_delivery(delivery, user, note, extra) -> str:
    delivery_cancel(delivery=delivery, user=user, staff=True, note=note)
    return "cancelled"


def _review(approve: bool):
    def apply(operation, user, note, extra) -> str:
        operation_review_decide(
            operation_id=operation.pk, staff_user=user, approve=approve, note=note
        )
        return "approved" if approve else "rejected"

    return apply


def _pause(operation, user, note, extra) -> str:
    operation_pause(operation_id=operation.pk, staff_user=user, note=note)
    return "paused"


def _resume(operation, user, note, extra) -> str:
    operation_resume(operation_id=operation.pk, staff_user=user, note=note)
    return "resumed"


def _cancel_operation(operation, user, note, extra) -> str:
    operation_cancel(operation_id=operation.pk, staff_user=user, note=note)
    return "cancelled, hold released"


_REVIEW = _status_in({State.NEEDS_REVIEW}, "operations in review")
MOVES: dict[str, Move] = {
    move.name: move
    for move in (
        Move("action:reconcile", "action", "Reconcile now", "actions.reconcile_action",
             _in_flight, _reconcile),
        Move("action:resend", "action", "Re-send", "actions.resolve_action", _in_flight, _resend),
        Move("action:mark_failed", "action", "Mark failed", "actions.resolve_action",
             _in_flight, _mark_failed),
        Move("delivery:resolve_sent", "delivery", "Resolve unknown as sent",
             "messaging.resolve_delivery", _status_in({D.UNKNOWN}, "unknown deliveries"),
             _resolve(D.SENT), needs_message_id=True),
        Move("delivery:resolve_failed", "delivery", "Resolve unknown as failed",
             "messaging.resolve_delivery", _status_in({D.UNKNOWN}, "unknown deliveries"),
             _resolve(D.FAILED)),
        Move("delivery:cancel", "delivery", "Cancel", "messaging.cancel_delivery",
             _status_in(CANCELLABLE, "queued or claimed deliveries"), _cancel_delivery),
        Move("operation:approve", "operation", "Approve review", "operations.review_operation",
             _REVIEW, _review(True)),
        Move("operation:reject", "operation", "Reject review", "operations.review_operation",
             _REVIEW, _review(False)),
        Move("operation:pause", "operation", "Pause", "operations.pause_operation",
             _pausable, _pause),
        Move("operation:resume", "operation", "Resume", "operations.pause_operation",
             _status_in({State.PAUSED}, "paused operations"), _resume),
        Move("operation:cancel", "operation", "Cancel", "operations.pause_operation",
             _cancellable_operation, _cancel_operation),
    )
}  # fmt: skip


def refusal_for(move: Move, kind: str, entity) -> str | None:
    """Why `move` cannot be applied to this entity now, or None."""
    if entity is None:
        return "not found (purged or a mistyped id)"
    if kind != move.kind:
        return f"a {kind}: {move.label.lower()} applies to {move.kind}s"
    return move.refusal(entity)


@dataclass
class Outcome:
    key: str
    ok: bool
    text: str


def apply_move(*, move: Move, key: str, entity, user, note: str, extra: dict) -> Outcome:
    """One row: checked again now (it may have moved since the preview), then the service;
    a refusal is this row's outcome, never an exception for the batch."""
    kind = key.partition(":")[0]
    reason = refusal_for(move, kind, entity)
    if reason:
        return Outcome(key, False, f"not applied: {reason}")
    try:
        text = move.apply(entity, user, note, extra)
    except REFUSALS as exc:
        current = getattr(exc, "current", None)
        return Outcome(key, False, f"not applied: {f'it is {current} now' if current else exc}")
    return Outcome(key, True, text)
