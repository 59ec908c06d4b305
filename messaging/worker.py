"""The delivery worker: claim, attempt, outcome, and the beat's catch-up and lease reaper.
Every status change goes through `messaging.services.delivery_transition`.

At most once: a delivery is `sending` (committed) before its request leaves, and nothing that
happens after that point ever sends it again automatically.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from core import events, lifecycle_sql, tracing
from core.lifecycle import Actor, IllegalTransition, Step, touch, transition_path
from messaging.models import DELIVERY_LIFECYCLE, Conversation, D, Delivery, Provider, SocialAccount
from messaging.providers.x import NotSent, OutcomeUnknown, Refused, XDirectMessages
from messaging.selectors import deliveries_due_q, delivery_for_attempt
from messaging.services import delivery_transition

logger = logging.getLogger(__name__)


class CredentialMissing(Exception):
    pass


def _touch_delivery(*, delivery_id, changes: dict[str, Any], only_if: Q) -> bool:
    """A visible change without a transition (attempts, last error, lease), made only while
    `only_if` still holds: the row is locked, checked, then touched (`updated_at` bumped, the
    change published). False, and nothing written, when another worker got there first."""
    with transaction.atomic():
        if not Delivery.objects.select_for_update().filter(only_if, pk=delivery_id).exists():
            return False
        return touch(lifecycle=DELIVERY_LIFECYCLE, pk=delivery_id, changes=changes)


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


# The credential references this process has resolved. A delivery whose account uses one that
# still resolves may be claimed before it is read (`_claim_unread`).
_RESOLVED_REFS: set[str] = set()


def _token(credential_ref: str) -> str | None:
    return os.environ.get(credential_ref.removeprefix("env:")) or None


def resolve_credential(account: SocialAccount) -> str:
    token = _token(account.credential_ref)
    if not token:
        raise CredentialMissing(f"credential {account.credential_ref} is not configured")
    _RESOLVED_REFS.add(account.credential_ref)
    return token


def provider_for(account: SocialAccount) -> XDirectMessages:
    if account.provider == Provider.X:
        return _x()
    raise ValueError(f"no adapter for provider {account.provider!r}")


def _x() -> XDirectMessages:
    return XDirectMessages(settings.X_API_BASE_URL, timeout=settings.DM_PROVIDER_TIMEOUT_SECONDS)


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


def _claim_and_attempt(delivery: Delivery, worker_id: str, spare: _Spare) -> str:
    """A queued delivery: connect first (connecting sends nothing), then `claimed` and
    `sending` in one transaction, so one commit precedes the first byte instead of two. If
    connecting fails, the delivery is claimed alone and handled as any claimed one is (retried
    later, or failed when it cannot be sent at all)."""
    try:
        token, adapter, conn = _connect(delivery, spare)
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
            steps=(
                _claim_step(worker_id),
                _sending_step(delivery.social_account.provider, worker_id),
            ),
            actor=Actor.worker(),
            only_from={D.QUEUED},
            fields=_WORKER_READS,
        )
    except IllegalTransition:  # another worker, or a cancel, got there first
        conn.close()
        return "not_claimed"
    delivery.status, delivery.lease_owner = sending.status, sending.lease_owner
    return _send(delivery, adapter, conn, token)


def _connect(delivery: Delivery, spare: _Spare | None = None):
    token = resolve_credential(delivery.social_account)
    adapter = provider_for(delivery.social_account)
    if spare is not None and spare.adapter is not None and isinstance(adapter, XDirectMessages):
        return token, *spare.take()
    return token, adapter, adapter.connect()


class _Spare:
    """The connection `_process` opened before it knew which delivery it had (an X one, the
    one provider with an adapter), for the attempt that turns out to need it, or the refusal
    it met (raised again there, so a provider that hangs is waited for once); closed at the
    end if nothing took it."""

    def __init__(self) -> None:
        self.adapter: XDirectMessages | None = None
        self.conn = None
        self.refused: NotSent | None = None

    def open(self) -> None:
        self.adapter = _x()
        try:
            self.conn = self.adapter.connect()
        except NotSent as exc:
            self.refused = exc

    def take(self) -> tuple[XDirectMessages, Any]:
        if self.refused is not None:
            raise self.refused
        adapter, conn = self.adapter, self.conn
        self.adapter = self.conn = None
        return adapter, conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.adapter = self.conn = None


# What a delivery claimed before it was read must satisfy: its account's provider has an
# adapter, its credential resolves now, it is due, and it was queued in the trace in hand, so
# its history rows carry its trace as after `tracing.adopt`. Anything else (a first delivery
# of this process, a retry, a beat pick-up, a missing credential) is read first, as before.
_UNREAD_READS = ("status", "lease_owner", "text", "conversation", "social_account")


@functools.cache
def _unread_condition(using: str) -> str:
    quote = connections[using].ops.quote_name

    def column(model, name: str) -> str:
        return f"{quote(model._meta.db_table)}.{quote(model._meta.get_field(name).column)}"

    return (
        f"{column(SocialAccount, 'provider')} = %s "
        f"AND {column(SocialAccount, 'credential_ref')} = ANY(%s) "
        f"AND {column(Delivery, 'trace_id')} = %s AND {column(Delivery, 'next_attempt_at')} <= %s"
    )


def _claim_unread(delivery_id, worker_id: str, spare: _Spare) -> str | None:
    """`queued → claimed → sending` for a delivery this worker has not read: the guarded claim
    reads its account and conversation in the same statement, so a delivery costs two
    statements (this and its outcome). None when the guard does not hold or does not apply,
    and nothing was written: the caller reads the delivery and goes the usual way."""
    using = Delivery.objects.db
    trace_id = tracing.current_trace_id()
    if not (trace_id and lifecycle_sql.one_statement(using)):
        return None
    tokens = {ref: token for ref in tuple(_RESOLVED_REFS) if (token := _token(ref))}
    if not tokens:
        return None
    try:
        pk = uuid.UUID(str(delivery_id))
    except ValueError:
        return None
    spare.open()
    if spare.refused is not None:
        return None
    guard = lifecycle_sql.Guard(
        _unread_condition(using),
        [Provider.X, list(tokens), trace_id, timezone.now()],
        related=("social_account", "conversation"),
    )
    with tracing.bind(delivery_id=pk):
        try:
            sending = transition_path(
                lifecycle=DELIVERY_LIFECYCLE,
                pk=pk,
                steps=(_claim_step(worker_id), _sending_step(Provider.X, worker_id)),
                actor=Actor.worker(),
                only_from={D.QUEUED},
                fields=_UNREAD_READS,
                guard=guard,
            )
        except IllegalTransition:
            return None
        adapter, conn = spare.take()
        return _send(sending, adapter, conn, tokens[sending.social_account.credential_ref])


# What the worker reads back from its own transitions: the row's other columns are neither
# returned nor loaded (the instance defers them).
_WORKER_READS = ("status", "lease_owner")


def _claim_step(worker_id: str) -> Step:
    return Step(D.CLAIMED, detail=f"claimed by {worker_id}", updates=_lease(worker_id))


def _sending_step(provider: str, worker_id: str) -> Step:
    return Step(
        D.SENDING,
        detail=f"sending to {provider} as {worker_id}",
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
    step = _sending_step(delivery.social_account.provider, worker_id)
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

    The events of its transitions leave in two writes to Redis, each after the commits that
    made them: claimed and sending together just before the provider call (the timelines show
    `sending` while it waits), then the outcome; the first write's replies are read with the
    second's (one wait on Redis)."""
    with events.batch():
        return _process(delivery_id, worker_id)


def _process(delivery_id, worker_id: str) -> str:
    spare = _Spare()
    try:
        return _claim_unread(delivery_id, worker_id, spare) or _process_read(
            delivery_id, worker_id, spare
        )
    finally:
        spare.close()


def _process_read(delivery_id, worker_id: str, spare: _Spare) -> str:
    delivery = _delivery_with_account(delivery_id)
    if delivery is None:
        return "not_claimed"
    if delivery.status == D.QUEUED and delivery.next_attempt_at <= timezone.now():
        with tracing.adopt(delivery.trace_id), tracing.bind(delivery_id=delivery.pk):
            return _claim_and_attempt(delivery, worker_id, spare)
    spare.close()
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
