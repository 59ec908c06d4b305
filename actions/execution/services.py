"""The life of one action after its proposal (`actions/proposals`) and signature
(`signing.py`): create, expire, submit and reconcile (dispatched on the action's type through
`kinds.KINDS`), and what staff do with stuck work. Every status change goes through
`core.lifecycle.transition(lifecycle=ACTION_LIFECYCLE, …)`."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from actions.evm_clients import bundler_client
from actions.execution.kinds import kind_of
from actions.execution.models import (
    ACTION_LIFECYCLE,
    IN_FLIGHT,
    PENDING_ON_CHAIN,
    Action,
    ActionStatus,
    ActionType,
)
from actions.execution.selectors import actions_pending_on_chain
from actions.execution.transitions import ReconcileOutcome, action_touch, outcome_of
from core import metrics, tracing
from core.chains import UnknownChain
from core.lifecycle import Actor, IllegalTransition, create, record_history, transition
from evm.bundler import BundlerClient, BundlerError
from evm.userops import entry_point_address, user_op_hash

logger = logging.getLogger(__name__)


class ActionResolutionError(Exception):
    """Staff asked for something the action's state does not allow (shown to them as is)."""


@transaction.atomic
def action_create(
    *,
    user,
    application,
    type: ActionType | str,
    summary: str,
    chain_id: int,
    smart_account: str,
    params: dict[str, Any],
    user_op: dict[str, Any] | None = None,
    entry_point_version: str | None = None,
    ttl_seconds: int | None = None,
    actor: Actor | None = None,
    action_id: uuid.UUID | None = None,
    detail: str | None = None,
) -> Action:
    """A `proposed` action; for 4337 actions the userOpHash is computed now (SPEC)."""
    now = timezone.now()
    version = entry_point_version or settings.ENTRY_POINT_VERSION
    entry_point = ""
    op_hash = None
    if user_op is not None:
        entry_point = entry_point_address(version)
        op_hash = user_op_hash(user_op, entry_point=entry_point, chain_id=chain_id, version=version)
    return create(
        lifecycle=ACTION_LIFECYCLE,
        actor=actor or Actor.agent(),
        detail=detail or "proposed by the action tool",
        values={
            "id": action_id or uuid.uuid4(),
            "user": user,
            "application": application,
            "type": type,
            "status": ActionStatus.PROPOSED,
            "summary": summary,
            "chain_id": chain_id,
            "smart_account": smart_account,
            "params": params,
            "user_op": user_op,
            "entry_point": entry_point,
            "entry_point_version": version if user_op is not None else "",
            "user_op_hash": op_hash,
            "created_at": now,
            "expires_at": now + timedelta(seconds=ttl_seconds or settings.ACTION_TTL_SECONDS),
        },
    )


def swap_quote_bounded(action: Action) -> bool:
    """A swap whose quote lapses when (or before) the action does: its expiry is the quote's."""
    lapses = action.params.get("quote_expires_at") if action.type == ActionType.SWAP else None
    when = parse_datetime(lapses) if isinstance(lapses, str) else None
    return when is not None and when <= action.expires_at


def action_expire_if_overdue(*, action: Action, now: datetime | None = None) -> Action:
    """Expire a `proposed` action past its TTL, so nobody ever reads a stale `proposed`."""
    now = now or timezone.now()
    if action.status != ActionStatus.PROPOSED or action.expires_at > now:
        return action
    try:
        return transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.EXPIRED,
            actor=Actor.system(),
            detail="the swap quote expired before the user signed"
            if swap_quote_bounded(action)
            else "TTL passed before the user signed",
            only_from={ActionStatus.PROPOSED},
        )
    except IllegalTransition:
        # Signed or rejected a moment ago: that status wins.
        action.refresh_from_db()
        return action


def actions_expire_overdue(*, now: datetime | None = None, limit: int = 500) -> int:
    now = now or timezone.now()
    overdue = Action.objects.filter(status=ActionStatus.PROPOSED, expires_at__lte=now)
    expired = 0
    for action in overdue.order_by("expires_at")[:limit]:
        with tracing.adopt(action.trace_id), tracing.bind(action_id=action.pk):
            action = action_expire_if_overdue(action=action, now=now)
        if action.status == ActionStatus.EXPIRED:
            expired += 1
    return expired


def action_reconcile(
    *,
    action_id,
    actor: Actor,
    client: BundlerClient | None = None,
    note: str = "",
    force_resend: bool = False,
) -> ReconcileOutcome:
    """Advance an in-flight action from what the outside world says.

    Best-effort and never raises for a provider problem. Not one transaction on purpose: no
    database transaction may stay open across the network call. Each outcome is counted
    (`picnic_action_reconcile_total`).
    """
    outcome = _action_reconcile(
        action_id=action_id, actor=actor, client=client, note=note, force_resend=force_resend
    )
    metrics.count_reconcile(outcome)
    return outcome


def _action_reconcile(
    *, action_id, actor: Actor, client: BundlerClient | None, note: str, force_resend: bool
) -> ReconcileOutcome:
    action = Action.objects.get(pk=action_id)
    now = timezone.now()
    if action.status not in IN_FLIGHT:
        return ReconcileOutcome.NOT_PENDING
    if action.status == ActionStatus.SIGNED:
        # The submit task runs on commit of the signature; only one that never ran (a worker
        # killed, a lost enqueue) is picked up here, after a grace period.
        grace = timedelta(seconds=settings.ACTIONS_SUBMIT_GRACE_SECONDS)
        if not force_resend and action.signed_at and action.signed_at > now - grace:
            return ReconcileOutcome.PENDING
    # Stamped first, whatever follows: batches take the least recently reconciled first, so an
    # action that cannot settle now never holds the head of the queue.
    Action.objects.filter(pk=action.pk).update(last_reconciled_at=now)
    if action.status == ActionStatus.SIGNED:
        try:
            action = action_submit(action_id=action.pk, client=client)
        except IllegalTransition:
            return ReconcileOutcome.RACED
        return outcome_of(action)
    return kind_of(action.type).reconcile(
        action, actor=actor, client=client, note=note, force_resend=force_resend
    )


def actions_reconcile_pending(
    *, batch_size: int | None = None, client: BundlerClient | None = None
) -> Counter:
    """One batch of in-flight actions, least recently reconciled first."""
    outcomes: Counter = Counter()
    rows = list(
        actions_pending_on_chain(
            limit=batch_size or settings.ACTIONS_RECONCILE_BATCH_SIZE
        ).values_list("pk", "trace_id", "chain_id")
    )
    # Each action on its own chain's bundler (one client per chain for the batch).
    clients: dict[int, BundlerClient] = {}
    for pk, trace_id, chain_id in rows:
        # Each action in the trace of the request that proposed it.
        with tracing.adopt(trace_id), tracing.bind(action_id=pk):
            try:
                chain_client = client or clients.get(chain_id) or bundler_client(chain_id)
            except (UnknownChain, BundlerError) as exc:
                # A chain taken out of the table, or without a bundler: the others go on.
                logger.warning("reconcile %s: chain %s: %s", pk, chain_id, exc)
                action_touch(action_id=pk, last_reconcile_error=str(exc)[:2000])
                outcomes[ReconcileOutcome.UNAVAILABLE] += 1
                continue
            clients[chain_id] = chain_client
            outcomes[action_reconcile(action_id=pk, actor=Actor.worker(), client=chain_client)] += 1
    return outcomes


def action_submit(*, action_id, client: BundlerClient | None = None) -> Action:
    """signed → submitted → sent, by the action's kind (`kinds.KINDS`): a user operation to
    the bundler, a card request to Gnosis Pay, a card limit change to the relayer. A transient
    failure leaves it `submitted` with the error; reconciliation sends it again."""
    action_type = Action.objects.values_list("type", flat=True).get(pk=action_id)
    return kind_of(action_type).send(action_id=action_id, client=client)


def action_mark_failed(*, action_id, staff_user, note: str) -> Action:
    """Staff end an in-flight action that cannot finish. The signed user operation stays valid
    until its nonce is used: the note should say why it will not be (or why that is fine)."""
    note = _required_note(note)
    action = Action.objects.get(pk=action_id)
    if action.status not in IN_FLIGHT:
        raise ActionResolutionError(
            f"Only in-flight actions can be marked failed; it is {action.status}"
        )
    message = f"marked failed by staff: {note}"
    try:
        return transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.FAILED,
            actor=Actor.staff(staff_user),
            only_from=set(IN_FLIGHT),
            updates={"error": message},
            detail=message,
        )
    except IllegalTransition as exc:
        raise ActionResolutionError(f"The action moved on meanwhile: it is {exc.current}") from None


def action_resend(*, action_id, staff_user, note: str) -> ReconcileOutcome:
    """Staff deliver an in-flight action again now: the same signed op to the bundler (after
    checking it is neither included nor held), the card request with the live session, or the
    submission a lost task never started. Recorded in the history with the staff user."""
    action = _staff_request(
        action_id=action_id, staff_user=staff_user, note=note, done="re-sent", asked="re-send"
    )
    return action_reconcile(
        action_id=action.pk,
        actor=Actor.staff(staff_user),
        note="re-sent by staff",
        force_resend=True,
    )


def action_reconcile_now(*, action_id, staff_user, note: str) -> ReconcileOutcome:
    """Staff ask for a reconciliation now (the beat would come later): recorded in the history
    with the staff user and their note, whatever the outside world then says."""
    action = _staff_request(
        action_id=action_id, staff_user=staff_user, note=note, done="reconciled", asked="reconcile"
    )
    return action_reconcile(
        action_id=action.pk, actor=Actor.staff(staff_user), note="reconciled by staff"
    )


def _staff_request(*, action_id, staff_user, note: str, done: str, asked: str) -> Action:
    """A staff request on an in-flight action, kept in its history with the staff user and
    their note before anything is asked of the outside world."""
    note = _required_note(note)
    action = Action.objects.get(pk=action_id)
    if action.status not in IN_FLIGHT:
        raise ActionResolutionError(f"Only in-flight actions can be {done}; it is {action.status}")
    record_history(
        lifecycle=ACTION_LIFECYCLE,
        instance=action,
        from_status=action.status,
        status=action.status,
        actor=Actor.staff(staff_user),
        detail=f"{asked} requested by staff: {note}",
    )
    return action


def _required_note(note: str) -> str:
    note = (note or "").strip()
    if not note:
        raise ActionResolutionError("A note is required: say why, for the audit trail")
    return note[:1000]


def action_status_refresh(*, action: Action, client: BundlerClient | None = None) -> Action:
    """The side effect of get_action_status: expire if overdue, reconcile if on chain."""
    action = action_expire_if_overdue(action=action)
    if action.status in PENDING_ON_CHAIN:
        action_reconcile(
            action_id=action.pk, actor=Actor.agent(), client=client, note="get_action_status"
        )
    return action
