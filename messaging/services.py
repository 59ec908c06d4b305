"""Writes for DM deliveries: the API's send, the sender's or staff's cancel and staff's
resolution of an unknown outcome. Every status change goes through `delivery_transition`; the
worker's part (claim, attempt, outcome, the lease reaper) is `messaging.worker`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from core import metrics
from core.lifecycle import (
    Actor,
    IllegalTransition,
    create,
    enqueue_on_commit,
    transition,
)
from messaging.errors import IdempotencyConflict
from messaging.models import (
    CANCELLABLE,
    DELIVERY_LIFECYCLE,
    MANAGE_ROLES,
    SEND_ROLES,
    Conversation,
    D,
    Delivery,
)
from messaging.selectors import (
    Forbidden,
    NotFound,
    membership_role,
    social_account_for,
)

# The ends of a send that `picnic_dm_outcomes_total` counts (unknown may later become either).
DM_OUTCOMES = frozenset({D.SENT, D.FAILED, D.UNKNOWN})


def delivery_transition(
    *,
    delivery_id,
    to: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    updates: dict[str, Any] | None = None,
    only_from: set[str] | None = None,
    expected: str | None = None,
    fields: tuple[str, ...] | None = None,
) -> Delivery:
    delivery = transition(
        lifecycle=DELIVERY_LIFECYCLE,
        pk=delivery_id,
        to=to,
        actor=actor,
        detail=detail,
        payload=payload,
        updates=updates,
        only_from=only_from,
        expected=expected,
        fields=fields,
    )
    if to in DM_OUTCOMES:
        metrics.count_dm_outcome(to)
    return delivery


def payload_hash(*, recipient_id: str, text: str) -> str:
    canonical = json.dumps({"recipient_id": recipient_id, "text": text}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class SendResult:
    delivery: Delivery
    created: bool


def _same_or_conflict(existing: Delivery, digest: str) -> SendResult:
    if existing.payload_hash != digest:
        raise IdempotencyConflict(
            f"idempotency_key {existing.idempotency_key} was already used with a different "
            f"payload (action {existing.id}); nothing was changed"
        )
    return SendResult(existing, created=False)


@transaction.atomic
def delivery_send(
    *,
    user,
    application,
    workspace_id,
    social_account_id,
    text: str,
    idempotency_key: uuid.UUID,
    conversation_id=None,
    recipient_id: str | None = None,
) -> SendResult:
    """Accept a DM for delivery, idempotently per (workspace, social account, key). One
    transaction: a new conversation exists only with the delivery that needed it."""
    account, _role = social_account_for(
        user=user, workspace_id=workspace_id, social_account_id=social_account_id, roles=SEND_ROLES
    )
    if conversation_id is not None:
        conversation = Conversation.objects.filter(
            pk=conversation_id, social_account=account
        ).first()
        if conversation is None:
            raise NotFound("Conversation not found for this social account")
    else:
        conversation, _ = Conversation.objects.get_or_create(
            social_account=account, recipient_id=recipient_id
        )
    digest = payload_hash(recipient_id=conversation.recipient_id, text=text)
    keyed = Delivery.objects.filter(
        workspace_id=account.workspace_id, social_account=account, idempotency_key=idempotency_key
    )
    if existing := keyed.first():
        return _same_or_conflict(existing, digest)
    try:
        delivery = create(
            lifecycle=DELIVERY_LIFECYCLE,
            actor=Actor.agent(),
            detail="accepted for delivery",
            values={
                "workspace_id": account.workspace_id,
                "social_account": account,
                "conversation": conversation,
                "text": text,
                "idempotency_key": idempotency_key,
                "payload_hash": digest,
                "created_by": user,
                "application": application,
            },
        )
    except IntegrityError:
        # A concurrent send with the same key won the unique constraint.
        return _same_or_conflict(keyed.get(), digest)
    enqueue_on_commit("messaging.tasks.delivery_deliver", delivery.pk)
    return SendResult(delivery, created=True)


def delivery_cancel(*, delivery: Delivery, user, staff: bool = False, note: str = "") -> Delivery:
    """queued/claimed → cancelled; a TransitionRefused (an IllegalTransition) once the
    delivery is sending or later. Staff may say why (`note`): it goes into the history row."""
    if not staff and delivery.created_by_id != user.pk:
        if membership_role(user=user, workspace_id=delivery.workspace_id) not in MANAGE_ROLES:
            raise Forbidden("Only the sender or a workspace owner/admin can cancel this delivery")
    try:
        return delivery_transition(
            delivery_id=delivery.pk,
            to=D.CANCELLED,
            actor=Actor.staff(user) if staff else Actor.end_user(user),
            only_from=set(CANCELLABLE),
            detail=f"cancelled by {'staff ' if staff else ''}{user.get_username()}"
            + (f": {note.strip()}" if note.strip() else ""),
        )
    except IllegalTransition as exc:
        raise exc.refused(
            f"Only queued or claimed deliveries can be cancelled; this one is {exc.current}"
        ) from exc


def delivery_resolve_unknown(
    *, delivery_id, staff_user, outcome: str, note: str, provider_message_id: str | None = None
) -> Delivery:
    """Staff settle an `unknown` delivery after checking with the provider by hand."""
    note = (note or "").strip()
    if not note:
        raise ValueError("a note is required to resolve an unknown delivery")
    if outcome == D.SENT and not (provider_message_id or "").strip():
        raise ValueError("resolving as sent needs the provider message id")
    if outcome not in (D.SENT, D.FAILED):
        raise ValueError("an unknown delivery resolves to sent or failed")
    updates: dict[str, Any] = {
        "reason": None if outcome == D.SENT else f"resolved by staff: {note}"
    }
    if outcome == D.SENT:
        updates["provider_message_id"] = provider_message_id.strip()
    return delivery_transition(
        delivery_id=delivery_id,
        to=outcome,
        actor=Actor.staff(staff_user),
        only_from={D.UNKNOWN},
        updates=updates,
        detail=f"resolved by staff {staff_user.get_username()}: {note}",
    )
