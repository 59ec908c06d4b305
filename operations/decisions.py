"""What staff decide about an operation: approve or reject it in review, pause and resume it.
Each decision is one transition, with the staff user and their note in the history."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from core.lifecycle import Actor, IllegalTransition, enqueue_on_commit
from operations import billing
from operations.models import DispatchStatus, Operation, Stage, State
from operations.services import DISPATCH_TASK, operation_transition

S = State


def operation_review_decide(*, operation_id, staff_user, approve: bool, note: str) -> Operation:
    """Approve (→ queued, dispatched) or reject (→ cancelled, hold released).

    `review` says a human must intervene (seed 003: "caso contrário, null"); once staff have
    decided nobody must, so it becomes null. The review as decided (rule, request, decision,
    staff user, note) stays in the history row: that is the audit trail.
    """
    note = (note or "").strip()
    if not note:
        raise ValueError("a note is required for a review decision")
    with transaction.atomic():
        operation = Operation.objects.select_for_update().get(pk=operation_id)
        decision = "approved" if approve else "rejected"
        decided = {
            **(operation.review or {}),
            "decision": decision,
            "decided_by": staff_user.get_username(),
            "decided_at": timezone.now().isoformat(),
            "note": note,
        }
        detail = f"{decision} by staff {staff_user.get_username()}: {note}"
        if approve:
            operation = operation_transition(
                operation_id=operation.pk,
                to=S.QUEUED,
                stage=Stage.DISPATCH,
                actor=Actor.staff(staff_user),
                detail=detail,
                payload={"review": decided},
                updates={"review": None, "next_check_at": timezone.now()},
                only_from={S.NEEDS_REVIEW},
            )
            enqueue_on_commit(DISPATCH_TASK, operation.pk)
            return operation
        return operation_transition(
            operation_id=operation.pk,
            to=S.CANCELLED,
            actor=Actor.staff(staff_user),
            detail=detail,
            payload={"review": decided},
            updates={"review": None, **billing.release_hold(operation=operation)},
            only_from={S.NEEDS_REVIEW},
        )


_PAUSE_STAGE = {
    S.QUEUED: Stage.DISPATCH,
    S.NEEDS_REVIEW: Stage.REVIEW,
    S.RUNNING: Stage.GENERATION,
    S.WAITING: Stage.GENERATION,
}


def operation_pause(*, operation_id, staff_user, note: str = "") -> Operation:
    operation = Operation.objects.get(pk=operation_id)
    if operation.state not in _PAUSE_STAGE:
        raise IllegalTransition(
            model="Operation", pk=operation_id, current=operation.state, target=S.PAUSED
        )
    return operation_transition(
        operation_id=operation.pk,
        to=S.PAUSED,
        stage=_PAUSE_STAGE[operation.state],
        actor=Actor.staff(staff_user),
        only_from={operation.state},
        updates={"paused_from": operation.state},
        detail=f"paused by staff {staff_user.get_username()}" + (f": {note}" if note else ""),
    )


def operation_resume(*, operation_id, staff_user, note: str = "") -> Operation:
    operation = Operation.objects.get(pk=operation_id)
    target = operation.paused_from or S.QUEUED
    target = S.RUNNING if target == S.WAITING else target  # the next check tells which
    stage = Stage.DISPATCH if target == S.QUEUED else None
    return operation_transition(
        operation_id=operation.pk,
        to=target,
        stage=stage,
        actor=Actor.staff(staff_user),
        only_from={S.PAUSED},
        updates={"paused_from": "", "next_check_at": timezone.now()},
        detail=f"resumed by staff {staff_user.get_username()}" + (f": {note}" if note else ""),
    )


# Staff cancel only work the backend never received: a running generation is paused (or left
# to finish), since its usage may already be billed.
CANCELLABLE_BY_STAFF = frozenset({S.QUEUED, S.NEEDS_REVIEW, S.PAUSED})


def operation_cancel(*, operation_id, staff_user, note: str) -> Operation:
    """queued / needs_review / paused, never dispatched → cancelled, the hold released."""
    note = (note or "").strip()
    if not note:
        raise ValueError("a note is required to cancel an operation")
    with transaction.atomic():
        operation = Operation.objects.select_for_update().get(pk=operation_id)
        if (
            operation.state not in CANCELLABLE_BY_STAFF
            or operation.dispatch_status != DispatchStatus.PENDING
        ):
            raise IllegalTransition(
                model="Operation", pk=operation_id, current=operation.state, target=S.CANCELLED
            )
        return operation_transition(
            operation_id=operation.pk,
            to=S.CANCELLED,
            actor=Actor.staff(staff_user),
            detail=f"cancelled by staff {staff_user.get_username()}: {note}",
            updates={
                "review": None,
                "paused_from": "",
                **billing.release_hold(operation=operation),
            },
            only_from={operation.state},
        )
