"""Writes for DM deliveries. Every status change goes through `delivery_transition`.

At most once: a delivery is `sending` (committed) before its request leaves, and nothing that
happens after that point ever sends it again automatically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core import events, metrics, tracing
from core.lifecycle import (
    Actor,
    IllegalTransition,
    Step,
    create,
    enqueue_on_commit,
    touch,
    transition,
    transition_path,
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
    Provider,
    SocialAccount,
)
from messaging.providers.x import NotSent, OutcomeUnknown, Refused, XDirectMessages
from messaging.selectors import (
    Forbidden,
    NotFound,
    deliveries_due_q,
    delivery_for_attempt,
    membership_role,
    social_account_for,
)

logger = logging.getLogger(__name__)

# The ends of a send that `picnic_dm_outcomes_total` counts (unknown may later become either).
DM_OUTCOMES = frozenset({D.SENT, D.FAILED, D.UNKNOWN})


class CredentialMissing(Exception):
    pass


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


def _touch_delivery(*, delivery_id, changes: dict[str, Any], only_if: Q) -> bool:
    """A visible change without a transition (attempts, last error, lease), made only while
    `only_if` still holds: the row is locked, checked, then touched (`updated_at` bumped, the
    change published). False, and nothing written, when another worker got there first."""
    with transaction.atomic():
        if not Delivery.objects.select_for_update().filter(only_if, pk=delivery_id).exists():
            return False
        return touch(lifecycle=DELIVERY_LIFECYCLE, pk=delivery_id, changes=changes)


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


def _lease(worker_id: str, now=None) -> dict[str, Any]:
    now = now or timezone.now()
    return {
        "lease_owner": worker_id,
        "lease_expires_at": now + timedelta(seconds=settings.DM_LEASE_SECONDS),
    }


def deliveries_claim(*, worker_id: str, limit: int = 10, delivery_id=None) -> list[uuid.UUID]:
    """Claim due deliveries without double-claiming (SKIP LOCKED on PostgreSQL, and the
    conditional UPDATE of the transition everywhere)."""
    now = timezone.now()
    lease = _lease(worker_id, now)
    claimed = []
    with transaction.atomic():
        due = Delivery.objects.select_for_update(skip_locked=True).filter(deliveries_due_q(now))
        if delivery_id is not None:
            due = due.filter(pk=delivery_id)
        columns = ("pk", "status", "trace_id")
        rows = list(due.order_by("next_attempt_at", "created_at").values_list(*columns)[:limit])
        for pk, status, trace_id in rows:
            # The claim is part of the item's story: in the trace that queued it.
            with tracing.adopt(trace_id), tracing.bind(delivery_id=pk):
                if status == D.QUEUED:
                    try:
                        delivery_transition(
                            delivery_id=pk,
                            to=D.CLAIMED,
                            actor=Actor.worker(),
                            updates=lease,
                            only_from={D.QUEUED},
                            detail=f"claimed by {worker_id}",
                        )
                    except IllegalTransition:
                        continue
                # A claim retaken (its connection never opened, or its worker died before
                # sending): no new history row, but the timeline shows the lease holder, so it
                # is a touch.
                elif not _touch_delivery(
                    delivery_id=pk,
                    changes=lease,
                    only_if=deliveries_due_q(now) & Q(status=D.CLAIMED),
                ):
                    continue
                claimed.append(pk)
    return claimed


def resolve_credential(account: SocialAccount) -> str:
    name = account.credential_ref.removeprefix("env:")
    token = os.environ.get(name)
    if not token:
        raise CredentialMissing(f"credential {account.credential_ref} is not configured")
    return token


def provider_for(account: SocialAccount) -> XDirectMessages:
    if account.provider == Provider.X:
        return XDirectMessages(
            settings.X_API_BASE_URL, timeout=settings.DM_PROVIDER_TIMEOUT_SECONDS
        )
    raise ValueError(f"no adapter for provider {account.provider!r}")


def _delivery_with_account(delivery_id) -> Delivery | None:
    return delivery_for_attempt(delivery_id=delivery_id)


def delivery_attempt(*, delivery_id, worker_id: str) -> str:
    """Deliver one claimed delivery. Not one transaction: `sending` must be committed before
    the request leaves, and no transaction may stay open across the provider call."""
    delivery = _delivery_with_account(delivery_id)
    if delivery is None or delivery.status != D.CLAIMED or delivery.lease_owner != worker_id:
        return "not_ours"
    # In the trace of the request that queued it, also when beat picks it up later.
    with tracing.adopt(delivery.trace_id), tracing.bind(delivery_id=delivery.pk):
        return _attempt(delivery, worker_id)


def _attempt(delivery: Delivery, worker_id: str) -> str:
    """`delivery_attempt` on a delivery read (with its account and conversation) after this
    worker claimed it."""
    try:
        token, adapter, conn = _connect(delivery)
    except (CredentialMissing, ValueError) as exc:
        return _fail_unsendable(delivery, exc)
    except NotSent as exc:
        return _retry_later(delivery, worker_id, str(exc))
    try:
        _mark_sending(delivery, worker_id)
    except IllegalTransition:  # cancelled while we were connecting
        conn.close()
        return "cancelled"
    return _send(delivery, adapter, conn, token)


def _claim_and_attempt(delivery: Delivery, worker_id: str) -> str:
    """A queued delivery: connect first (connecting sends nothing), then `claimed` and
    `sending` in one transaction, so one commit precedes the first byte instead of two. If
    connecting fails, the delivery is claimed alone and handled as any claimed one is (retried
    later, or failed when it cannot be sent at all)."""
    try:
        token, adapter, conn = _connect(delivery)
    except (CredentialMissing, ValueError) as exc:
        return _fail_unsendable(delivery, exc) if _claim(delivery, worker_id) else "not_claimed"
    except NotSent as exc:
        if not _claim(delivery, worker_id):
            return "not_claimed"
        return _retry_later(delivery, worker_id, str(exc))
    try:
        # queued -> claimed -> sending: one conditional UPDATE and both history rows.
        sending = transition_path(
            lifecycle=DELIVERY_LIFECYCLE,
            pk=delivery.pk,
            steps=(_claim_step(worker_id), _sending_step(delivery, worker_id)),
            actor=Actor.worker(),
            only_from={D.QUEUED},
            fields=_WORKER_READS,
        )
    except IllegalTransition:  # another worker, or a cancel, got there first
        conn.close()
        return "not_claimed"
    delivery.status, delivery.lease_owner = sending.status, sending.lease_owner
    return _send(delivery, adapter, conn, token)


def _connect(delivery: Delivery):
    token = resolve_credential(delivery.social_account)
    adapter = provider_for(delivery.social_account)
    return token, adapter, adapter.connect()


# What the worker reads back from its own transitions: the row's other columns are neither
# returned nor loaded (the instance defers them).
_WORKER_READS = ("status", "lease_owner")


def _claim_step(worker_id: str) -> Step:
    return Step(D.CLAIMED, detail=f"claimed by {worker_id}", updates=_lease(worker_id))


def _sending_step(delivery: Delivery, worker_id: str) -> Step:
    return Step(
        D.SENDING,
        detail=f"sending to {delivery.social_account.provider} as {worker_id}",
        updates={"lease_expires_at": timezone.now() + timedelta(seconds=settings.DM_LEASE_SECONDS)},
    )


def _claim_transition(delivery: Delivery, worker_id: str) -> None:
    step = _claim_step(worker_id)
    claimed = delivery_transition(
        delivery_id=delivery.pk,
        to=step.to,
        actor=Actor.worker(),
        updates=step.updates,
        only_from={D.QUEUED},
        detail=step.detail,
        fields=_WORKER_READS,
    )
    delivery.status, delivery.lease_owner = claimed.status, claimed.lease_owner


def _claim(delivery: Delivery, worker_id: str) -> bool:
    try:
        _claim_transition(delivery, worker_id)
    except IllegalTransition:
        return False
    return True


def _fail_unsendable(delivery: Delivery, exc: Exception) -> str:
    try:
        delivery_transition(
            delivery_id=delivery.pk,
            to=D.FAILED,
            actor=Actor.worker(),
            only_from={D.CLAIMED},
            updates={"reason": f"{exc}; nothing was sent"},
            detail=str(exc),
        )
    except IllegalTransition:  # cancelled meanwhile: nothing to do
        return "raced"
    return D.FAILED


def _mark_sending(delivery: Delivery, worker_id: str) -> None:
    step = _sending_step(delivery, worker_id)
    delivery_transition(
        delivery_id=delivery.pk,
        to=step.to,
        actor=Actor.worker(),
        only_from={D.CLAIMED},
        detail=step.detail,
        updates=step.updates,
    )


def _send(delivery: Delivery, adapter: XDirectMessages, conn, token: str) -> str:
    """After `sending` is committed: everything that goes wrong from here is unknown."""
    # claimed and sending are on the timelines before the provider call, not after its wait.
    events.flush()
    try:
        sent = adapter.send(
            conn, token=token, participant_id=delivery.conversation.recipient_id, text=delivery.text
        )
    except Refused as exc:
        return _settle(
            delivery,
            D.FAILED,
            reason=str(exc),
            payload=exc.payload,
            detail=f"provider refused ({exc.status}): {exc}",
        )
    except OutcomeUnknown as exc:
        return _settle(
            delivery,
            D.UNKNOWN,
            reason=str(exc),
            payload=exc.payload,
            detail=f"{exc}; the outcome is unknown and the message will not be re-sent",
        )
    if delivery.conversation.provider_conversation_id is None:
        # Only the first message of a conversation learns its id (guarded against a racer).
        Conversation.objects.filter(
            pk=delivery.conversation_id, provider_conversation_id__isnull=True
        ).update(provider_conversation_id=sent.conversation_id)
    return _settle(
        delivery,
        D.SENT,
        reason=None,
        payload=sent.payload,
        provider_message_id=sent.message_id,
        detail=f"provider message id {sent.message_id}",
    )


def _settle(
    delivery: Delivery, to: str, *, reason, payload, detail: str, provider_message_id=None
) -> str:
    updates: dict[str, Any] = {"reason": reason, "lease_expires_at": None}
    if provider_message_id:
        updates["provider_message_id"] = provider_message_id
    # A late real answer may still settle a delivery the lease reaper already marked unknown.
    sources = {D.SENDING, D.UNKNOWN} if to != D.UNKNOWN else {D.SENDING}
    try:
        delivery_transition(
            delivery_id=delivery.pk,
            to=to,
            actor=Actor.worker(),
            only_from=sources,
            expected=D.SENDING,  # we committed it: one conditional UPDATE, no read first
            updates=updates,
            detail=detail,
            payload=payload,
            fields=_WORKER_READS,
        )
    except IllegalTransition:
        return "raced"
    return to


def _retry_later(delivery: Delivery, worker_id: str, error: str) -> str:
    attempts = delivery.attempts + 1
    if attempts >= settings.DM_MAX_CONNECT_ATTEMPTS:
        reason = f"provider unreachable after {attempts} attempts, nothing was sent: {error}"
        try:
            delivery_transition(
                delivery_id=delivery.pk,
                to=D.FAILED,
                actor=Actor.worker(),
                only_from={D.CLAIMED},
                updates={"reason": reason, "attempts": attempts, "last_error": error},
                detail=reason,
            )
        except IllegalTransition:  # cancelled meanwhile: nothing to do
            return "raced"
        return D.FAILED
    retried = _touch_delivery(
        delivery_id=delivery.pk,
        only_if=Q(status=D.CLAIMED, lease_owner=worker_id),
        changes={
            "attempts": attempts,
            "last_error": error,
            "lease_owner": "",
            "lease_expires_at": None,
            "next_attempt_at": timezone.now()
            + timedelta(seconds=settings.DM_RETRY_BACKOFF_SECONDS * attempts),
        },
    )
    return "retry" if retried else "raced"


def delivery_process(*, delivery_id, worker_id: str) -> str:
    """Claim one delivery and attempt it (the on-commit task).

    A `queued` delivery is due from its creation (only retries postpone, and they stay
    `claimed`), so it is claimed by the transition's conditional UPDATE alone, on the row read
    once for the attempt (`_claim_and_attempt`); anything else goes through
    `deliveries_claim`.

    The events of its transitions leave in two Redis round trips, each after the commits that
    made them: claimed and sending together just before the provider call (the timelines show
    `sending` while it waits), then the outcome."""
    with events.batch():
        return _process(delivery_id, worker_id)


def _process(delivery_id, worker_id: str) -> str:
    delivery = _delivery_with_account(delivery_id)
    if delivery is None:
        return "not_claimed"
    if delivery.status == D.QUEUED and delivery.next_attempt_at <= timezone.now():
        with tracing.adopt(delivery.trace_id), tracing.bind(delivery_id=delivery.pk):
            return _claim_and_attempt(delivery, worker_id)
    if not deliveries_claim(worker_id=worker_id, delivery_id=delivery_id, limit=1):
        return "not_claimed"
    return delivery_attempt(delivery_id=delivery_id, worker_id=worker_id)


def deliveries_process_due(*, worker_id: str, limit: int = 20) -> dict[str, int]:
    """Beat: the catch-up path for anything whose on-commit task was lost, and retries."""
    outcomes: dict[str, int] = {}
    for pk in deliveries_claim(worker_id=worker_id, limit=limit):
        try:
            outcome = delivery_attempt(delivery_id=pk, worker_id=worker_id)
        except IllegalTransition as exc:
            # The attempt stands down on the races it knows; this is the backstop, so one
            # delivery someone else moved first never stops the rest of the batch.
            logger.info("delivery %s: lost a race (%s); left to the winner", pk, exc)
            outcome = "raced"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def deliveries_reap_leases() -> int:
    """A `sending` delivery whose lease lapsed belongs to a dead worker: `unknown`, not re-sent."""
    now = timezone.now()
    reaped = 0
    lapsed = Delivery.objects.filter(status=D.SENDING, lease_expires_at__lt=now)
    for pk, trace_id in lapsed.values_list("pk", "trace_id"):
        try:
            with tracing.adopt(trace_id), tracing.bind(delivery_id=pk):
                delivery_transition(
                    delivery_id=pk,
                    to=D.UNKNOWN,
                    actor=Actor.system(),
                    only_from={D.SENDING},
                    updates={"reason": "the worker stopped while sending; the outcome is unknown"},
                    detail="worker lease expired while sending; the message will not be re-sent",
                )
            reaped += 1
        except IllegalTransition:
            pass
    return reaped


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
